"""Super-resolution images from localizations (``python -m decode_mem.render``); names load lazily.

    image = render(table, shape_px=(256, 256), pixel_size=100.0, render_pixel=10.0, blur="gaussian", sigma=10)
    render_file("locs.csv", "image.png", render_pixel=10.0)
    save_side_by_side(mean_frame("stack.tif"), image, "side_by_side.png", pixel_size=100.0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from decode_mem._lazy import lazy_exports

if TYPE_CHECKING:
    from decode_mem.render.depth import render_depth, save_depth_png
    from decode_mem.render.image import BLURS, Histogram, render, render_counted, render_file, render_shape, save_image
    from decode_mem.render.widefield import mean_frame, save_side_by_side, save_widefield

__all__ = ["BLURS", "Histogram", "mean_frame", "render", "render_counted", "render_depth", "render_file",
           "render_shape", "save_depth_png", "save_image", "save_side_by_side", "save_widefield"]
__getattr__, __dir__ = lazy_exports(__name__, {
    **dict.fromkeys(["BLURS", "Histogram", "render", "render_counted", "render_file", "render_shape", "save_image"],
                    "image"),
    **dict.fromkeys(["mean_frame", "save_side_by_side", "save_widefield"], "widefield"),
    **dict.fromkeys(["render_depth", "save_depth_png"], "depth"),
})
