"""napari sample data: the quick start's simulated nuclear-pore movie (``pipelines/quickstart.yaml``: rings of 8
DNA-PAINT sites, drifting, EMCCD) and its localizations by the shipped model, made on demand into a cache folder
(``$XDG_CACHE_HOME/decode_mem/napari_sample``, else ``~/.cache/...``) and kept there: a second open reads them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from decode_mem.napari.layers import LayerData, open_localizations

QUICKSTART = Path(__file__).resolve().parents[2] / "pipelines" / "quickstart.yaml"


def cache_folder() -> Path:
    """Where the sample data are made: ``$XDG_CACHE_HOME/decode_mem/napari_sample`` (default ``~/.cache``)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "decode_mem" / "napari_sample"


def quickstart(frames: int | None = None, size: int | None = None) -> Any:
    """The quick start's pipeline settings, with ``frames`` frames of ``size`` x ``size`` px where given."""
    from decode_mem.pipeline.config import load_pipeline

    simulate: dict[str, Any] = {}
    if frames is not None:
        simulate["frames"] = int(frames)
    if size is not None:
        simulate["simulation"] = {"frame_size": [int(size), int(size)]}
    return load_pipeline(QUICKSTART, overrides={"simulate": simulate} if simulate else None)


def sample_movie(folder: str | os.PathLike | None = None, *, frames: int | None = None,
                 size: int | None = None) -> Path:
    """The quick start's movie (its simulation and seed; ``frames``, ``size`` to make it smaller), simulated into
    ``folder`` (default ``cache_folder()``) unless it is there already; its ground truth beside it."""
    from decode_mem.simulate.stack import simulate_stack

    config = quickstart(frames, size)
    step = config.simulate
    h, w = step.simulation.frame_size
    folder = Path(folder) if folder is not None else cache_folder()
    movie = folder / f"nuclear_pores_{step.frames}x{h}x{w}.tif"
    if not movie.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        simulate_stack(step.simulation, step.frames, movie, movie.with_name(movie.stem + "_truth.csv"),
                       seed=config.seed)
    return movie


def sample_localizations(movie: Path) -> Path:
    """The shipped model's localizations of ``movie`` (the quick start's infer settings) beside it, made once."""
    from decode_mem.infer import InferConfig, run_inference
    from decode_mem.infer.live_parts import summary_complete

    out = movie.parent / "localized"
    locs = out / f"{movie.stem}.csv"
    if not (locs.is_file() and summary_complete(out / f"{movie.stem}.json")):
        step = quickstart().infer
        run_inference(InferConfig(inputs=(str(movie),), out=str(out), chunk_size=step.chunk_size,
                                  batch_size=step.batch_size, formats=("csv",), device="cpu", report=False))
    return locs


def movie_layer(movie: Path, pixel_size: float) -> LayerData:
    """The movie as an image layer in nm (camera pixel ``j``'s centre at ``(j + 0.5) * pixel_size``)."""
    import tifffile

    return (tifffile.imread(movie), {"name": movie.stem, "scale": (1.0, pixel_size, pixel_size),
                                     "translate": (0.0, pixel_size / 2, pixel_size / 2),
                                     "units": ("pixel", "nm", "nm"), "axis_labels": ("frame", "y", "x"),
                                     "colormap": "gray", "metadata": {"path": str(movie)}}, "image")


def nuclear_pores() -> list[LayerData]:
    """npe2 sample: the movie alone."""
    config = quickstart()
    return [movie_layer(sample_movie(), config.simulate.simulation.camera.pixel_size)]


def nuclear_pores_localized() -> list[LayerData]:
    """npe2 sample: the movie, its rendered localizations and the localizations as points."""
    movie = sample_movie()
    opened = open_localizations(sample_localizations(movie), name=movie.stem)
    layer = movie_layer(movie, opened.pixel_size)
    layer[1]["visible"] = False  # the super-resolution image is what one looks at; the movie lies beneath
    return [layer, *opened.layers]
