"""Super-resolution images from localizations (``python -m decode_mem.render``); names load lazily.

    image = render(table, shape_px=(256, 256), pixel_size=100.0, render_pixel=10.0, blur="gaussian", sigma=10)
    render_file("locs.csv", "image.png", render_pixel=10.0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from decode_mem._lazy import lazy_exports

if TYPE_CHECKING:
    from decode_mem.render.image import BLURS, render, render_counted, render_file, render_shape, save_image

__all__ = ["BLURS", "render", "render_counted", "render_file", "render_shape", "save_image"]
__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(__all__, "image"))
