"""decode_mem as a napari plugin (``pip install -e ".[napari]"``; the manifest is ``napari.yaml`` here).

``reader``: localization files (CSV, parquet, Picasso HDF5 + yaml) as a rendered image and points, in nm;
``localize``: a widget that runs ``decode_mem.infer`` on a movie in a worker thread (progress, Cancel);
``live``: a widget that follows a movie still being written (``--follow``) and refreshes the rendered layer;
``sample``: the quick start's simulated nuclear-pore movie and its localizations, made on demand.
``layers`` builds the layer data without napari; only the widgets import napari and Qt, and nothing outside
this package imports it: ``import decode_mem`` and every CLI stay free of napari and Qt.
"""
