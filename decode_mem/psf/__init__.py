"""PSF calibration: bead z-stacks (or a SMAP ``3dcal.mat``) -> a cubic-spline PSF file (``psf.h5``).

``python -m decode_mem.psf BEADS... --z_step NM --out psf.h5`` (see ``__main__``). The file format lives in
``decode_mem.io.psf_file``, its rendering in ``decode_mem.simulate.spline``. Names load lazily (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from decode_mem._lazy import lazy_exports

if TYPE_CHECKING:
    from decode_mem.psf.build import spline_from_smap
    from decode_mem.simulate.spline_fit import gauss_widths, spline_coefficients, spline_from_volume

__all__ = ["gauss_widths", "spline_coefficients", "spline_from_smap", "spline_from_volume"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "spline_from_smap": "build",
    "spline_from_volume": "decode_mem.simulate.spline_fit",
    "gauss_widths": "decode_mem.simulate.spline_fit",
    "spline_coefficients": "decode_mem.simulate.spline_fit",
})
