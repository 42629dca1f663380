"""The calibration at a glance: background map, photon and width histograms, mean PSF profile vs the model,
and the camera's noise against its prediction (one PNG, matplotlib without pyplot state)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from decode_mem.io.atomic import atomic_output

if TYPE_CHECKING:
    from decode_mem.calibrate.result import Calibration


def plot_calibration(cal: Calibration, out: str | os.PathLike) -> Path:
    """Write the calibration figure as a PNG (atomically) and return its path."""
    from matplotlib.figure import Figure  # no pyplot: no global figure state

    d = cal.diagnostics
    fig = Figure(figsize=(13, 7.5))
    axes = fig.subplots(2, 3)
    ax = axes[0, 0]
    im = ax.imshow(d.background_smoothed, cmap="magma", origin="upper")
    fig.colorbar(im, ax=ax, label="photons / px / frame")
    ax.set(title=f"background, smoothed (median {cal.value('background_photons'):.3g}, "
                 f"p95/p5 {cal.value('background_spread'):.3g})", xlabel="x [px]", ylabel="y [px]")

    ax = axes[0, 1]
    if len(d.photons):
        hi = np.percentile(d.photons, 99.5)
        bins = np.linspace(0, hi, 60)
        ax.hist(d.photons, bins=bins, alpha=0.6, label="every localization")
        if len(d.flux):
            ax.hist(d.flux, bins=bins, alpha=0.6, label="fully-on frames")
        ax.axvline(cal.value("photons_median"), color="k", ls="--", label="median")
        ax.legend()
    ax.set(title="photons per localization", xlabel="photons", ylabel="count")

    ax = axes[0, 2]
    if len(d.sigmas):
        ax.hist(d.sigmas, bins=np.linspace(0.3, max(3.0, float(np.percentile(d.sigmas, 99.5))), 60))
        ax.axvline(cal.value("psf_sigma_px"), color="k", ls="--", label="median")
        ax.legend()
    ax.set(title=f"PSF width of {len(d.sigmas)} isolated spots", xlabel="σ [px]", ylabel="count")

    ax = axes[1, 0]
    if len(d.profile_r):
        ax.plot(d.profile_r, d.profile, "o", ms=3, label="spots (mean, per photon)")
        ax.plot(d.profile_r, d.profile_model, "-", label=f"model σ = {cal.value('psf_sigma_px'):.3g} px")
        ax.legend()
    ax.set(title="mean PSF profile", xlabel="distance from the fitted centre [px]", ylabel="fraction of photons / px")

    ax = axes[1, 1]
    check = cal.camera_check
    if check.curve:
        m = np.asarray(check.curve["mean"])
        ax.plot(m, check.curve["variance"], "o", label="measured (binned pixels)")
        grid = np.linspace(0, m.max() * 1.1, 50)
        ax.plot(grid, check.predicted_slope * grid + check.read_variance, "-", label="camera settings")
        ax.legend()
    ax.set(title=f"camera noise: {check.verdict} (ratio {check.noise_ratio:.2f})", xlabel="mean [photons]",
           ylabel="variance [photons²]")

    ax = axes[1, 2]
    ax.axis("off")
    lines = [f"{k}: not measured" if not np.isfinite(e.value) else
             f"{k}: {e.value:.4g}" + (f" ± {e.uncertainty:.2g}" if e.uncertainty is not None else "")
             for k, e in cal.estimates.items()]
    lines += ["", f"camera {cal.camera.kind}, pixel {cal.camera.pixel_size:g} nm", f"frames used {cal.frames_used}"]
    ax.text(0, 1, "\n".join(lines), va="top", family="monospace", fontsize=9)
    fig.suptitle(Path(cal.movie).name)
    fig.tight_layout()
    out = Path(out)
    with atomic_output(out) as tmp:
        fig.savefig(tmp, dpi=90, format="png")
    return out
