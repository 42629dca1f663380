"""The registration's figure: each bead's leave-one-out error as an arrow over the field, and the distortion the
map corrects beyond an affine map as a heat map (matplotlib Figure, no pyplot)."""

from __future__ import annotations

import io

import numpy as np

from decode_mem.register.core import Registration

GRID = 81  # points per side of the heat map


def registration_figure(reg: Registration):  # -> matplotlib Figure
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.8), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots(1, 2)
    px = reg.pixel_size[0]
    p1 = np.asarray(reg.beads["channel1_px"], np.float64).reshape(-1, 2)
    p2 = np.asarray(reg.beads["channel2_px"], np.float64).reshape(-1, 2)
    loo = np.asarray(reg.beads["leave_one_out_nm"], np.float64).reshape(-1, 2)
    h1, w1 = reg.shapes[0]
    err = np.hypot(loo[:, 0], loo[:, 1])
    scale = max(float(np.percentile(err, 90)), 1e-3) if len(err) else 1.0
    q = ax[0].quiver(p1[:, 0] * px / 1000, p1[:, 1] * px / 1000, loo[:, 0], -loo[:, 1], err, cmap="viridis",
                     angles="xy", scale_units="xy", scale=scale / (0.06 * max(h1, w1) * px / 1000))
    fig.colorbar(q, ax=ax[0], label="leave-one-out error (nm)")
    ax[0].set(xlim=(0, w1 * px / 1000), ylim=(h1 * px / 1000, 0), aspect="equal", xlabel="x (µm, channel 1)",
              ylabel="y (µm)")
    ax[0].set_title(f"{len(p1)} beads, each mapped by the map fitted without it:\n"
                    f"RMS {reg.tre['leave_one_out_rms']:.2f} nm, max {reg.tre['leave_one_out_max']:.2f} nm (an arrow "
                    f"{0.06 * max(h1, w1) * px / 1000:.2g} µm long: {scale:.2g} nm)", fontsize=10)
    h2, w2 = reg.shapes[1]
    gx, gy = np.meshgrid(np.linspace(0, w2 - 1, GRID), np.linspace(0, h2 - 1, GRID))
    mx, my = reg.transform(gx, gy)
    a = reg.transform.affine_part()
    ax_, ay_ = a[0, 0] * gx + a[0, 1] * gy + a[0, 2], a[1, 0] * gx + a[1, 1] * gy + a[1, 2]
    beyond = np.hypot(mx - ax_, my - ay_) * px
    im = ax[1].imshow(beyond, extent=(-0.5 * px / 1000, (w2 - 0.5) * px / 1000, (h2 - 0.5) * px / 1000,
                                      -0.5 * px / 1000), cmap="magma", origin="upper")
    ax[1].plot(p2[:, 0] * px / 1000, p2[:, 1] * px / 1000, "c.", ms=4, label="beads")
    fig.colorbar(im, ax=ax[1], label="nm")
    ax[1].set(xlabel="x (µm, channel 2)", ylabel="y (µm)")
    ax[1].set_title(f"map {reg.transform.name}:\nits correction beyond an affine map", fontsize=10)
    ax[1].legend(loc="lower right", fontsize=8)
    return fig


def registration_png(reg: Registration) -> bytes:
    buf = io.BytesIO()
    registration_figure(reg).savefig(buf, format="png", dpi=100)
    return buf.getvalue()
