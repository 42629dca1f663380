"""The PSF calibration at a glance: xz and yz sections, width in x and y against z, residual per bead (PNG)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from decode_mem.io.atomic import atomic_output
from decode_mem.psf.beads import BeadCalibration


def plot_psf(cal: BeadCalibration, out: str | os.PathLike) -> Path:
    """Write the figure atomically and return its path (matplotlib without pyplot state)."""
    from matplotlib.figure import Figure

    v, z, s = cal.volume, cal.z, cal.spline
    mid = v.shape[1] // 2
    fig = Figure(figsize=(13, 7.5))
    axes = fig.subplots(2, 2)
    extent = (-mid - 0.5, mid + 0.5, z[0], z[-1])
    for ax, section, name in ((axes[0, 0], v[:, mid, :], "xz (through the centre row)"),
                              (axes[0, 1], v[:, :, mid], "yz (through the centre column)")):
        ax.imshow(section, origin="lower", aspect="auto", extent=extent, cmap="magma")
        for zr in s.z_range:
            ax.axhline(zr, color="w", ls=":", lw=0.8)
        ax.set(title=f"averaged PSF, {name}", xlabel=f"{name[0]} [px]", ylabel="z [nm]")
    ax = axes[1, 0]
    if s.width_z is not None:
        ax.plot(s.width_z, s.width_x, label="σx (spline nodes)")
        ax.plot(s.width_z, s.width_y, label="σy (spline nodes)")
    for zr in s.z_range:
        ax.axvline(zr, color="k", ls=":", lw=0.8)
    ax.set(title=f"width against z (valid {s.z_range[0]:g} to {s.z_range[1]:g} nm)", xlabel="z [nm]",
           ylabel="Gaussian σ [px]")
    ax.legend()
    ax = axes[1, 1]
    res = np.array([b["residual"] for b in cal.beads])
    ax.bar(np.arange(len(res)), 100 * res)
    if len(res):
        ax.axhline(100 * np.median(res), color="k", ls="--", label=f"median {100 * np.median(res):.1f} %")
        ax.set_ylim(0, 100 * res.max() * 1.25)  # room above the bars for the legend
        ax.legend(loc="upper right")
    ax.set(title=f"residual per bead ({len(res)} beads; dropped: "
                 + (", ".join(f"{v} {k}" for k, v in cal.rejected.items() if v) or "none") + ")",
           xlabel="bead", ylabel="RMS(bead − PSF) / RMS(bead) [%]")
    region = f"; {cal.roi}x{cal.roi} px regions" + (" (chosen)" if cal.roi_auto else "") if cal.roi else ""
    fig.suptitle(f"PSF from {', '.join(Path(f).name for f in cal.files)}: {s.source}{region}")
    fig.tight_layout()
    out = Path(out)
    with atomic_output(out) as tmp:
        fig.savefig(tmp, format="png", dpi=90)
    return out
