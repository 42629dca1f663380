"""How the PSF changes across the field (PNG): focal shift and astigmatism maps, the PSF at the centre and the
corners, and the leave-one-bead-out errors that chose between one PSF and a field-dependent one."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from decode_mem.io.atomic import atomic_output
from decode_mem.psf.field import FieldCalibration
from decode_mem.simulate.field_spline import clamped_thin_plate

GRID = 40  # map points a side


def _values(cal: FieldCalibration, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(weights (N, K), focal shift (N,) nm) at field points, as the PSF file interpolates them."""
    values = np.column_stack([cal.weights, cal.shift_nm])
    out = clamped_thin_plate(cal.bead_xy, values, float(max(cal.field_shape)), np.column_stack([x, y]))
    return out[:, :-1], out[:, -1]


def _volume(cal: FieldCalibration, w: np.ndarray, shift: float) -> np.ndarray:
    """The 1-px PSF volume at a place with weights ``w`` and focal ``shift`` nm (on the stacks' z planes)."""
    from decode_mem.psf.beads import shift_volume

    shape = cal.mean + np.tensordot(w, cal.comps, axes=1) if len(w) else cal.mean.copy()
    step = float(cal.z[1] - cal.z[0])
    return shift_volume(shape, (shift / step, 0.0, 0.0))


def _widths(plane: np.ndarray) -> tuple[float, float]:
    """RMS widths (σx, σy) px of a plane's positive part."""
    p = np.clip(plane, 0, None)
    total = p.sum()
    n = p.shape[0]
    pos = np.arange(n) - (n - 1) / 2
    px, py = p.sum(axis=0) / total, p.sum(axis=1) / total
    mx, my = (px * pos).sum(), (py * pos).sum()
    return float(np.sqrt((px * (pos - mx) ** 2).sum())), float(np.sqrt((py * (pos - my) ** 2).sum()))


def plot_field(cal: FieldCalibration, out: str | os.PathLike) -> Path:
    """Write the figure atomically and return its path (matplotlib without pyplot state)."""
    from matplotlib.figure import Figure

    h, w = cal.field_shape
    gx, gy = np.meshgrid(np.linspace(0, w - 1, GRID), np.linspace(0, h - 1, GRID))
    weights, shift = _values(cal, gx.ravel(), gy.ravel())
    z0 = int(np.argmin(np.abs(cal.z)))
    diff = np.empty(len(shift))
    for i in range(len(shift)):
        sx, sy = _widths(_volume(cal, weights[i], shift[i])[z0])
        diff[i] = sx - sy
    fig = Figure(figsize=(15, 9))
    axes = fig.subplots(2, 3)
    extent = (-0.5, w - 0.5, h - 0.5, -0.5)
    for ax, values, title, cmap in ((axes[0, 0], shift, "focal shift [nm]", "coolwarm"),
                                    (axes[0, 1], diff, "σx − σy at z = 0 [px] (astigmatism)", "PiYG")):
        lim = float(np.abs(values).max()) or 1.0
        im = ax.imshow(values.reshape(GRID, GRID), extent=extent, cmap=cmap, vmin=-lim, vmax=lim)
        fig.colorbar(im, ax=ax, shrink=0.8)
        ax.plot(cal.bead_xy[:, 0], cal.bead_xy[:, 1], "k.", ms=4, label="beads")
        covered = cal.covered_map
        if covered is not None and not covered.all():
            ax.contourf(np.linspace(0, w - 1, covered.shape[1]), np.linspace(0, h - 1, covered.shape[0]),
                        (~covered).astype(float), levels=[0.5, 1.5], colors="none", hatches=["///"])
        ax.set(title=title, xlabel="x [px]", ylabel="y [px]")
    axes[0, 0].legend(loc="upper right", fontsize=8)
    # xz sections at the centre and the four corners
    ax = axes[0, 2]
    places = (("centre", (w - 1) / 2, (h - 1) / 2), ("top-left", 0, 0), ("top-right", w - 1, 0),
              ("bottom-left", 0, h - 1), ("bottom-right", w - 1, h - 1))
    sw, ss = _values(cal, np.array([p[1] for p in places]), np.array([p[2] for p in places]))
    mid = cal.mean.shape[1] // 2
    strips = [_volume(cal, sw[i], ss[i])[:, mid, :] for i in range(len(places))]
    ax.imshow(np.concatenate(strips, axis=1), origin="lower", aspect="auto", cmap="magma",
              extent=(0, len(places), cal.z[0], cal.z[-1]))
    ax.set_xticks(np.arange(len(places)) + 0.5, [p[0] for p in places], fontsize=8)
    for zr in (cal.z[cal.valid][0], cal.z[cal.valid][-1]):
        ax.axhline(zr, color="w", ls=":", lw=0.8)
    ax.set(title="xz section of the PSF at five places", ylabel="z [nm]")
    ax = axes[1, 0]
    order = np.argsort(cal.single_error)
    ax.plot(100 * cal.single_error[order], "s", label=f"one PSF (median {100 * np.median(cal.single_error):.1f} %)")
    ax.plot(100 * cal.field_error[order], "o", label=f"field-dependent, {cal.components} comp. (median "
                                                     f"{100 * np.median(cal.field_error):.1f} %)")
    ax.set(title=f"each bead left out, predicted from the others (p = {cal.p_value:.2g})", xlabel="bead (sorted)",
           ylabel="RMS(prediction − bead) / RMS(bead) [%]", ylim=(0, None))
    ax.legend(fontsize=8)
    ax = axes[1, 1]
    ax.plot(range(len(cal.by_components)), [100 * v for v in cal.by_components], "o-", label="field-dependent")
    ax.axhline(100 * np.median(cal.single_error), color="k", ls="--", label="one PSF")
    ax.set(title="median leave-one-out error against components", xlabel="components (+ focal shift)",
           ylabel="median error [%]", ylim=(0, None))
    ax.legend(fontsize=8)
    ax = axes[1, 2]
    if cal.weights.shape[1]:
        lim = float(np.abs(weights[:, 0]).max()) or 1.0
        im = ax.imshow(weights[:, 0].reshape(GRID, GRID), extent=extent, cmap="BrBG", vmin=-lim, vmax=lim)
        fig.colorbar(im, ax=ax, shrink=0.8)
        ax.plot(cal.bead_xy[:, 0], cal.bead_xy[:, 1], "k.", ms=4)
        ax.set(title="weight of the first shape component", xlabel="x [px]", ylabel="y [px]")
    else:
        ax.set_axis_off()
        ax.text(0.5, 0.5, "no shape component: the focal shift alone", ha="center", va="center")
    verdict = "a PSF that changes across the field" if cal.chosen else "one PSF (" + cal.reason.split(":")[0] + ")"
    warn = cal.warning()
    fig.suptitle(f"{len(cal.bead_xy)} beads over a {w}x{h} px field: {verdict}"
                 + (f"\n{warn}" if warn else ""), fontsize=11)
    fig.tight_layout()
    out = Path(out)
    with atomic_output(out) as tmp:
        fig.savefig(tmp, format="png", dpi=80)
    return out
