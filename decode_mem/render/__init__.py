"""Super-resolution images from localizations (``python -m decode_mem.render``); names load lazily.

    image = render(table, shape_px=(256, 256), pixel_size=100.0, render_pixel=10.0, blur="precision")
    rendering = Rendering(shape_px=(256, 256), pixel_size=100.0)  # the pixel from the precision; add() per table
    done = render_file("locs.csv", "image.png")  # done.image, done.n, done.render_pixel, done.zoom
    save_side_by_side(mean_frame("stack.tif"), done.image, "side_by_side.png", pixel_size=100.0,
                      render_pixel=done.render_pixel, zoom="auto")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from decode_mem._lazy import lazy_exports

if TYPE_CHECKING:
    from decode_mem.render.depth import render_depth, save_depth_png
    from decode_mem.render.image import (
        BLURS,
        Histogram,
        Rendering,
        render,
        render_counted,
        render_file,
        render_shape,
        save_image,
    )
    from decode_mem.render.widefield import mean_frame, save_side_by_side, save_widefield

__all__ = ["BLURS", "Histogram", "Rendering", "mean_frame", "render", "render_counted", "render_depth", "render_file",
           "render_shape", "save_depth_png", "save_image", "save_side_by_side", "save_widefield"]
__getattr__, __dir__ = lazy_exports(__name__, {
    **dict.fromkeys(["BLURS", "Histogram", "Rendering", "render", "render_counted", "render_file", "render_shape",
                     "save_image"], "image"),
    **dict.fromkeys(["mean_frame", "save_side_by_side", "save_widefield"], "widefield"),
    **dict.fromkeys(["render_depth", "save_depth_png"], "depth"),
})
