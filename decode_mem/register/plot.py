"""The registration's figure: each bead's leave-one-out error as an arrow over the field, and the distortion the
map corrects beyond an affine map as a heat map (matplotlib Figure, no pyplot)."""

from __future__ import annotations

import io

import numpy as np

from decode_mem.io.channels import RGB, dye_colours
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


def ratio_figure(assigner):  # -> matplotlib Figure; assigner: register.dyes.DyeAssigner (ratiometric)
    """The paired localizations' ratios: their histogram, each dye's window and the fitted Gaussians."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 3.6), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    edges, counts = assigner.histogram()
    step = 10  # 0.01 wide bars
    coarse = counts[: len(counts) // step * step].reshape(-1, step).sum(axis=1)
    left = edges[:-1:step][: len(coarse)]
    width = edges[step] - edges[0]
    keep = (left >= -0.1) & (left <= 1.1)
    ax.bar(left[keep], coarse[keep], width=width, align="edge", color="0.6", label="pairs")
    summary = assigner.summary()
    fit = (summary["crosstalk"] or {}).get("fit") or {}
    colours = [RGB[c] for c in dye_colours(len(assigner.dyes))]
    n = counts.sum()
    for k, d in enumerate(assigner.dyes):
        ax.axvspan(d.ratio - assigner.window, d.ratio + assigner.window, color=colours[k], alpha=0.15)
        f = fit.get(d.name)
        if f:
            r = np.linspace(f["ratio"] - 4 * f["sigma"], f["ratio"] + 4 * f["sigma"], 200)
            g = n * f["share"] * width * np.exp(-0.5 * ((r - f["ratio"]) / f["sigma"]) ** 2) / (
                f["sigma"] * np.sqrt(2 * np.pi))
            ax.plot(r, g, color=colours[k], label=f"{d.name}: window {d.ratio:g} ± {assigner.window:.3g}, fit "
                                                   f"{f['ratio']:.3f} ± {f['sigma']:.3f}")
    ax.set(xlabel="ratio I2 / (I1 + I2)", ylabel="pairs per 0.01", xlim=(-0.1, 1.1))
    ct = summary["crosstalk"]["overall"] if summary.get("crosstalk") else None
    share = summary.get("assigned_share")
    ax.set_title(f"{summary['localizations']['pairs']} pairs; assigned "
                 + ("n/a" if share is None else f"{100 * share:.1f} %") + " of all localizations; estimated crosstalk "
                 + ("n/a" if ct is None else f"{100 * ct:.2f} %"), fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    return fig


def ratio_png(assigner) -> bytes:
    buf = io.BytesIO()
    ratio_figure(assigner).savefig(buf, format="png", dpi=100)
    return buf.getvalue()
