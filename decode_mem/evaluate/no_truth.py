"""How good a result is without ground truth: localization precision (calibrated σ, NeNA) and resolution (FRC).

One streamed pass over a localization file (frame order), linking as it goes (``decode_mem.link``):

* **σ precision**: the RMS per axis of the localizer's own predicted σ (``sigma_x``/``sigma_y``; Picasso's
  ``lpx``/``lpy``), i.e. the RMSE those σ promise, and its median.
* **NeNA, corrected** (Endesfelder et al. 2014's idea, made right for this localizer): the per-axis differences
  between consecutive (lag 1) localizations of one *linked molecule* — not every next-frame neighbour, so other
  emitters barely enter. Their robust scale (1.4826 x median |d|) is ``σ √(2 (1 - ρ))`` for errors that
  correlate with coefficient ρ between consecutive frames, not ``σ √2``: it is divided by ``√(2 (1 - ρ))`` with
  ρ of the localizer (``link.correlation``; measured on simulations for decode_mem). A robust scale rather than
  NeNA's fit of the distance distribution: the fit follows the mode, which for localizations of mixed precision
  reads low (benchmarks/results/postprocess.md). Uncertainty: the spread of delete-one jackknife estimates over
  ``JACKKNIFE`` groups of molecules.
* **σ check**: the same pairs' differences divided by what the σ and ρ predict for them
  (``σ_i² + σ_j² - 2ρ σ_i σ_j``), their robust standard deviation (1.4826 x median |u|): 1 when σ and ρ hold.
* **Stated precision** (``precision_nm``): the RMS σ times the **σ scale**, the RMS of those same ``u`` (not
  robust; a jump beyond ``JUMP`` divided by what independent errors predict instead, ``scale_difference``), times
  the localizer's **unseen-error factor** (``link.correlation``, measured on simulations for each shipped model):
  the RMSE of the localizations, tails included, where the errors the σ do not predict (gross errors, crowded
  spots) show in consecutive differences, and the share they do not show (errors shared by consecutive frames
  beyond ρ, differences beyond the link radius) is the localizer's measured one. The RMS σ alone
  (``sigma_rms_nm``) reads 0.7-0.85 of the RMSE for decode_mem, whose σ describe the core of its errors well
  (robust σ check ~1) but not its tails (benchmarks/results/postprocess.md, postprocess_wide.md). Its limits:
  differences larger than the link radius are not linked (tails beyond it are not seen), and where other emitters
  are linked in (the dense filaments: sites 5 nm apart) the scale reads high.
  Uncertainty: the
  delete-one jackknife over ``JACKKNIFE`` groups of molecules. The 'auto' radius of this pass is
  ``QUALITY_FACTOR`` x the median σ, without linking's sigma gate.
* **NeNA as Picasso computes it** (``picasso.postprocess.nena``, picassosr 0.11): every pair of localizations in
  consecutive frames within 1 camera pixel, histogram of 0.001 px bins, the same model, Picasso's three starting
  points; its value is the fitted scale, for comparison (it reads low by ``√(1 - ρ)`` for this localizer).
* **FRC** (Nieuwenhuizen et al. 2013): two images rendered from halves of the localizations split by *molecule*
  (one emitter's correlated localizations fall into one half), their Fourier ring correlation and the
  resolution where it first falls below 1/7; beside it the usual split by alternating frames, which puts one
  emitter's correlated localizations into both halves. The images' pixel is half the median predicted σ (1 to 5 nm):
  a resolution finer than two pixels cannot be seen.
  **When the FRC is not a resolution** (``frc_withheld``; the value stays in the JSON with the reason beside it, the
  console and the report say why instead): the halves by molecule hold fewer than ``MIN_FRC_MOLECULES`` molecules
  each (chosen ad hoc: of 90 draws of uniformly scattered emitters in 1.6-6.4 µm fields, 6 crossed 1/7 at 30-240 nm
  by chance, all with halves of fewer than 20 molecules); the curve never reaches 1/7 (the halves share nothing) or
  never falls below it (finer than the images' pixel shows); it falls below 1/7 within the first ``FIELD_RINGS``
  rings, where the field's outline alone (every localization lies inside the camera frame) makes two halves agree —
  uniformly scattered emitters, each switching on once, cross there, at a third to a half of the field's side, while
  rings, grids and filaments cross at tens of nm (tests/evaluate/test_frc_verdict.py); the crossing is coarser
  than the diffraction limit (``DIFFRACTION_LIMIT``, 250 nm: λ/2NA of visible light at NA 1.2-1.4), so the
  localizations resolve no structure a widefield image does not (too few localizations to sample the structure yet,
  or none there); or the movie is ``dense`` (below), where the FRC reads finer than the localizations resolve.

* **Crowding for linking** (``link.crowding``): the share of localizations with another within this pass's link
  radius 100 frames earlier, and of multi-frame blinks that have a neighbour a link can reach; above 2 % a warning:
  the linked differences then mix emitters, and the σ scale and stated precision read high (filaments in
  benchmarks/results/postprocess.md). Above 50 % (``dense``) a second warning: emitters on together overlap so
  often that both FRC halves hold the same blends, and the FRC reads finer than the localizations resolve.

Memory: the linking window, the histograms and four images of at most ``MAX_FRC_SIDE``² pixels.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.errors import StackError
from decode_mem.io.localizations import file_format, iter_localizations, localization_meta, working_unit
from decode_mem.io.table import EmitterTable
from decode_mem.link.core import WORK_ROWS, Linker, candidate_pairs
from decode_mem.link.correlation import ErrorCorrelation, for_file
from decode_mem.link.crowding import LAG, ChanceNeighbours, Crowding
from decode_mem.link.files import auto_radius, check_radius, first_chunk, median_sigma

# |u| beyond this (what σ and ρ predict for a difference): a jump between two states, normalized as independent
# errors in the σ scale (``scale_difference``). A Gaussian difference is this far out twice in a billion; the core
# of decode_mem's u is heavier-tailed (its σ vary), and at 4 the wide model's crowded rings read 0.82-0.91 of the
# true RMSE. Chosen on the 14 movies of benchmarks/results/postprocess.md and postprocess_wide.md (3, 4 and 6 tried
# ad hoc), checked on 2 more simulated after it
JUMP = 6.0
FRC_THRESHOLD = 1.0 / 7.0
# when an FRC is not a resolution (module docstring, ``frc_withheld``)
MIN_FRC_MOLECULES = 100  # linked molecules in each half by molecule
FIELD_RINGS = 8  # a crossing within these rings is set by the field's outline, not by structure
DIFFRACTION_LIMIT = 250.0  # nm: a crossing coarser than this resolves nothing a widefield image does not
FRC_SMOOTH = 5  # rings averaged before the threshold is applied
MAX_FRC_SIDE = 2048  # px of the FRC images (coarser render pixels for a larger field of view)
# nm: the FRC images' pixel where the field of view allows: half the median predicted σ of the first rows, between
# these two. A fixed 5 nm put the Nyquist limit (10 nm) at the rings' resolution: their FRC read 10.0 nm or never
# fell below 1/7 (benchmarks/results/postprocess.md at 3f57c17)
FRC_PIXEL = 5.0
MIN_FRC_PIXEL = 1.0
JACKKNIFE = 10
LINKED_BINS = 300  # bins of the linked distances' histogram, up to the link radius
DIFF_BINS = 4000  # bins of the linked per-axis differences |dx|, |dy| up to the link radius (the median's)
PICASSO_BIN = 0.001  # camera px, Picasso's NeNA histogram bin
PICASSO_D_MAX = 1.0  # camera px
U_BINS = np.linspace(-10.0, 10.0, 2001)
# 'auto' radius of this pass: this many times the median predicted σ, a fixed radius (no sigma gate: the σ check
# reads the differences the σ predict badly, and a gate chosen by σ would keep out the pairs that show it). The σ
# scale sees the tails only up to the radius, and a wider one links more neighbours: 10 x put the stated precision
# within 15 % of the true RMSE on 6 of the 7 benchmark movies it was tried on (8 x: 5), but on 3 movies simulated
# afterwards it did worse than 8 x (2 of 3 against 3 of 3): no evidence that a wider radius is better
QUALITY_FACTOR = 8.0


@dataclass(frozen=True)
class Nena:
    """A NeNA fit: ``value`` (nm, per axis), ``uncertainty`` (nm; None where not estimated), the histogram
    (``centers`` nm, ``counts``) and the fitted curve, ``pairs`` counted; ``note`` says how it was made."""

    value: float | None
    uncertainty: float | None
    centers: np.ndarray
    counts: np.ndarray
    fit: np.ndarray | None
    pairs: int
    note: str = ""


@dataclass(frozen=True)
class Frc:
    """FRC of two halves: ``frequency`` (1/nm), ``curve``, ``resolution`` (nm at 1/7; None when the curve does not
    fall below it), ``split`` (how the halves were made), the images' ``pixel`` (nm); ``withheld``: why
    ``resolution`` is not a resolution (``frc_withheld``), None where it is one."""

    frequency: np.ndarray
    curve: np.ndarray
    resolution: float | None
    split: str
    pixel: float
    withheld: str | None = None

    @property
    def stated(self) -> float | None:
        """The resolution where it is one, else None."""
        return None if self.withheld else self.resolution


@dataclass(frozen=True)
class NoTruthResult:
    """Everything ``assess_file`` measured; ``as_dict`` for JSON (numbers that could not be computed: None)."""

    path: str
    localizations: int
    molecules: int
    sigma_rms: tuple[float, float] | None  # nm, x and y
    sigma_median: float | None
    nena: Nena
    nena_picasso: Nena
    sigma_check: float | None
    sigma_scale: float | None  # RMS of the σ check's u (module docstring)
    sigma_scale_uncertainty: float | None
    correlation: ErrorCorrelation
    link_radius: float
    frc_molecules: Frc | None
    frc_frames: Frc | None
    crowding: Crowding | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def precision(self) -> float | None:
        """The stated precision per axis (nm): the σ precision (x, y averaged in square) times the σ scale and the
        unseen-error factor where σ exists (the σ precision alone where no pair was linked), else the corrected
        NeNA."""
        if self.sigma_precision is None:
            return self.nena.value
        if self.sigma_scale is None:
            return self.sigma_precision
        return self.sigma_precision * self.sigma_scale * self.correlation.unseen_error_factor

    @property
    def sigma_precision(self) -> float | None:
        """The RMS of the predicted σ per axis (nm), unscaled: the RMSE the σ promise."""
        return None if self.sigma_rms is None else float(np.sqrt(np.mean(np.square(self.sigma_rms))))

    def as_dict(self) -> dict[str, Any]:
        def num(v: Any) -> Any:
            return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else round(float(v), 3)

        def frc(f: Frc | None) -> Any:
            return None if f is None else {"resolution_nm": num(f.resolution), "split": f.split, "pixel_nm": f.pixel,
                                            "withheld": f.withheld}

        return {
            "file": self.path, "localizations": self.localizations, "molecules": self.molecules,
            "precision_nm": num(self.precision),
            "sigma_rms_nm": None if self.sigma_rms is None else [num(v) for v in self.sigma_rms],
            "sigma_median_nm": num(self.sigma_median),
            "nena_nm": num(self.nena.value), "nena_uncertainty_nm": num(self.nena.uncertainty),
            "nena_pairs": self.nena.pairs, "nena_note": self.nena.note,
            "nena_picasso_nm": num(self.nena_picasso.value), "nena_picasso_pairs": self.nena_picasso.pairs,
            "sigma_check": num(self.sigma_check), "sigma_precision_nm": num(self.sigma_precision),
            "sigma_scale": num(self.sigma_scale), "sigma_scale_uncertainty": num(self.sigma_scale_uncertainty),
            "unseen_error_factor": num(self.correlation.unseen_error_factor),
            "error_correlation": self.correlation.to_dict(), "link_radius_nm": num(self.link_radius),
            "frc_molecule_split": frc(self.frc_molecules), "frc_frame_split": frc(self.frc_frames),
            **(self.crowding.as_dict() if self.crowding is not None else {}),
            **self.extras,
        }


def nena_model(d: np.ndarray, delta_a: float, s: float, ac: float, dc: float, sc: float) -> np.ndarray:
    """NeNA's distance density as Picasso fits it: one emitter's two localizations (``s`` per axis) plus a
    Gaussian bump of other neighbours."""
    a = ac + delta_a
    single = a * (d / (2 * s**2)) * np.exp(-(d**2) / (4 * s**2))
    return single + ac / (sc * np.sqrt(2 * np.pi)) * np.exp(-0.5 * ((d - dc) / sc) ** 2)


def fit_nena(centers: np.ndarray, counts: np.ndarray, start_s: float,
             starts: list[np.ndarray] | None = None) -> np.ndarray | None:
    """Picasso's fit (``postprocess.nena``): three starting points (or ``starts``: a refit from a fit's values,
    unbounded Levenberg-Marquardt), the least residual; None when none converges or there is nothing to fit."""
    refine = starts is not None
    if counts.sum() < 3:
        return None
    area = float(np.trapezoid(counts, centers))
    peak = float(centers[np.argmax(counts)])
    starts = starts or [[0.8 * area, start_s, 0.1 * area, 2 * start_s, start_s],
                        [0.8 * area, peak / np.sqrt(2), 0.1 * area, 0.7 * centers[-1], 0.3 * centers[-1]],
                        [0.8 * area, start_s, 0.1 * area, 0.5 * centers[-1], start_s]]
    with warnings.catch_warnings():  # "covariance could not be estimated": the values are what is used
        warnings.simplefilter("ignore")
        return _best_fit(centers, counts, starts, refine)


def _best_fit(centers: np.ndarray, counts: np.ndarray, starts: list, refine: bool) -> np.ndarray | None:
    """The fit of least squared residual among those from ``starts`` (None: none converged)."""
    from scipy.optimize import curve_fit

    best, popt = np.inf, None
    for p0 in starts:
        if not np.all(np.isfinite(p0)) or min(p0[1], p0[4]) <= 0:
            continue
        try:
            if refine:  # Levenberg-Marquardt from a fit: fast; the model is even in s and sc
                cand, _ = curve_fit(nena_model, centers, counts, p0=p0, maxfev=2000)
                cand[[1, 4]] = np.abs(cand[[1, 4]])
            else:
                cand, _ = curve_fit(nena_model, centers, counts, p0=p0, bounds=(0, np.inf), maxfev=20000)
        except (RuntimeError, ValueError):
            continue
        res = float(np.sum((nena_model(centers, *cand) - counts) ** 2))
        if res < best:
            best, popt = res, cand
    return popt


def frc_curve(a: np.ndarray, b: np.ndarray, pixel: float) -> tuple[np.ndarray, np.ndarray]:
    """Fourier ring correlation of two images of the same field (zero-padded to a square): ring frequencies
    (1/nm) and ``Re Σ F_a F_b* / sqrt(Σ|F_a|² Σ|F_b|²)`` per ring of one frequency pixel, up to Nyquist."""
    from scipy import fft

    n = max(a.shape)
    fa = fft.rfft2(a.astype(np.float32), s=(n, n))
    fb = fft.rfft2(b.astype(np.float32), s=(n, n))
    ky = fft.fftfreq(n) * n
    kx = np.arange(fa.shape[1])
    ring = np.rint(np.hypot(ky[:, None], kx[None, :])).astype(np.int64)
    # rfft keeps half the plane: columns 1 .. n/2-1 stand for two mirror columns each
    weight = np.where((kx == 0) | ((n % 2 == 0) & (kx == n // 2)), 1.0, 2.0)[None, :]
    rings = n // 2 + 1
    inside = ring < rings
    r = ring[inside]
    w = np.broadcast_to(weight, ring.shape)[inside]
    cross = np.bincount(r, weights=(w * (fa * np.conj(fb)).real[inside]), minlength=rings)
    pa = np.bincount(r, weights=(w * np.abs(fa[inside]) ** 2), minlength=rings)
    pb = np.bincount(r, weights=(w * np.abs(fb[inside]) ** 2), minlength=rings)
    with np.errstate(invalid="ignore", divide="ignore"):
        curve = cross / np.sqrt(pa * pb)
    return np.arange(rings) / (n * pixel), curve


def frc_resolution(frequency: np.ndarray, curve: np.ndarray, threshold: float = FRC_THRESHOLD) -> float | None:
    """1 / the frequency where the FRC falls below ``threshold`` for the last time (the finest scale at which the
    halves still agree; linear between rings): a structure's spectral zeros (a ring of one diameter has some) dip
    the curve below the threshold at low frequency and it comes back; the zero ring is left out. None when it
    never falls below (the halves agree up to Nyquist); the first ring's scale when it never reaches it."""
    c = curve[1:]
    f = frequency[1:]
    above = np.nonzero(c >= threshold)[0]
    if len(above) == 0:
        return float(1.0 / f[0])
    i = above[-1]
    if i == len(c) - 1:
        return None
    if not np.isfinite(c[i + 1]):
        return float(1.0 / f[i])
    t = (c[i] - threshold) / (c[i] - c[i + 1])
    return float(1.0 / (f[i] + t * (f[i + 1] - f[i])))


def frc_withheld(frc: Frc, molecules: tuple[int, int], dense: bool = False) -> str | None:
    """Why ``frc.resolution`` (halves split by molecule, ``molecules`` in each) is not a resolution, in words; None
    where it is one. The criteria and why: the module docstring."""
    curve = smoothed(frc.curve)[1:]
    if min(molecules) < MIN_FRC_MOLECULES:
        return (f"too few molecules for an FRC ({molecules[0]} and {molecules[1]} in the two halves, "
                f"{MIN_FRC_MOLECULES} each needed)")
    if not np.any(curve >= FRC_THRESHOLD):
        return "the two halves never agree (the FRC stays below 1/7): they share no structure"
    if frc.resolution is None:
        return (f"the halves agree up to the finest scale the FRC images show ({2 * frc.pixel:g} nm): finer than "
                f"that, not measured")
    if 1.0 / frc.resolution < frc.frequency[min(FIELD_RINGS, len(frc.frequency) - 1)]:
        return (f"the FRC falls below 1/7 at {frc.resolution:.0f} nm, within its first {FIELD_RINGS} rings, where "
                f"the field's outline alone makes two halves agree: the localizations show no structure (too few "
                f"of them, or emitters scattered uniformly)")
    if frc.resolution > DIFFRACTION_LIMIT:
        return (f"{frc.resolution:.0f} nm is coarser than the diffraction limit ({DIFFRACTION_LIMIT:g} nm): the "
                f"localizations resolve no structure yet (too few of them, or emitters without structure)")
    if dense:
        return (f"the movie is dense (emitters on together overlap so often that both halves hold the same blends): "
                f"the FRC ({frc.resolution:.0f} nm) reads finer than the localizations resolve")
    return None


def smoothed(curve: np.ndarray, rings: int = FRC_SMOOTH) -> np.ndarray:
    """The FRC averaged over ``rings`` neighbouring rings (the ends over fewer): the noise of a ring of few
    pixels should not decide where the curve crosses the threshold."""
    values = np.nan_to_num(curve.astype(np.float64))
    kernel = np.ones(rings)
    return np.convolve(values, kernel, "same") / np.convolve(np.ones(len(values)), kernel, "same")


class _Halves:
    """Two super-resolution images filled from two halves of the localizations."""

    def __init__(self, shape_px: tuple[int, int], pixel_size: float, render_pixel: float) -> None:
        from decode_mem.render import Histogram

        self.a = Histogram(shape_px=shape_px, pixel_size=pixel_size, render_pixel=render_pixel)
        self.b = Histogram(shape_px=shape_px, pixel_size=pixel_size, render_pixel=render_pixel)

    def add(self, table: EmitterTable, in_a: np.ndarray) -> None:
        self.a.add(table.select(in_a))
        self.b.add(table.select(~in_a))

    def frc(self, split: str) -> Frc | None:
        if self.a.n == 0 or self.b.n == 0:
            return None
        freq, curve = frc_curve(self.a.image, self.b.image, self.a.render_pixel)
        return Frc(freq, curve, frc_resolution(freq, smoothed(curve)), split, self.a.render_pixel)


def molecule_half(group: np.ndarray) -> np.ndarray:
    """A fixed pseudo-random half of the molecule ids (a multiplicative hash's top bit)."""
    return ((group.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(63)).astype(bool)


def assess_file(path: str | os.PathLike, *, pixel_size: float | None = None,
                correlation: ErrorCorrelation | None = None, radius: float | str = "auto", max_dark: int = 1,
                frc_pixel: float | None = None, field_px: tuple[int, int] | None = None) -> NoTruthResult:
    """Precision and resolution of the localizations in ``path`` without ground truth (module docstring).

    ``correlation``: the localizer's frame-to-frame error correlation (None: ``link.correlation.for_file``'s,
    the model's that wrote the file); ``pixel_size`` (nm): the camera pixel (CSV files record none; Picasso's
    1-pixel NeNA window needs it);
    ``radius`` (nm or 'auto') and ``max_dark``: the linking; ``field_px`` (H, W): the camera frame where the file
    does not record it (default: the localizations' extent); ``frc_pixel`` (nm): the FRC images' pixel (None: half
    the median predicted σ, ``MIN_FRC_PIXEL`` to ``FRC_PIXEL``; coarser where the field needs more than
    ``MAX_FRC_SIDE`` pixels)."""
    path = Path(path)
    radius = check_radius(radius)
    correlation = for_file(path) if correlation is None else correlation
    unit = working_unit(path, pixel_size)
    meta = localization_meta(path)  # a CSV's: its infer run's summary beside it
    # a given pixel size wins over a CSV's summary; a file's own record over a given one. None: not known, and
    # Picasso's NeNA (pairs within 1 camera pixel) is n/a
    camera_px = (pixel_size or meta.pixel_size) if file_format(path) == "csv" else (meta.pixel_size or pixel_size)
    chunk = first_chunk(path, unit)
    radius_nm = auto_radius(chunk, unit, path, QUALITY_FACTOR) if radius == "auto" else float(radius)
    has_sigma = "sigma_x" in chunk and "sigma_y" in chunk
    if field_px is None:
        if meta.width and meta.height and meta.pixel_size:  # the recorded frame, in table units (a CSV's: nm)
            field_px = tuple(math.ceil(round(n * meta.pixel_size / unit, 6)) for n in (meta.height, meta.width))
        else:
            field_px = _extent(path, unit)
    extent_nm = max(field_px) * unit
    if frc_pixel is None:  # half the median σ (module constants), where the file has σ
        median = median_sigma(chunk, unit)
        frc_pixel = FRC_PIXEL if median is None else min(FRC_PIXEL, max(MIN_FRC_PIXEL, median / 2))
    render_pixel = max(float(frc_pixel), extent_nm / MAX_FRC_SIDE)
    by_molecule = _Halves(field_px, unit, render_pixel)
    by_frames = _Halves(field_px, unit, render_pixel)
    linker = Linker(radius_nm / unit, max_dark, correlation)
    chance = ChanceNeighbours(radius_nm / unit, radius_nm, max_dark)
    rho1 = correlation.consecutive
    bin_nm = PICASSO_BIN * (camera_px or 1.0)
    nena_edges = np.linspace(0.0, radius_nm, LINKED_BINS + 1)
    link_hist = np.zeros((JACKKNIFE, len(nena_edges) - 1))
    diff_edges = np.linspace(0.0, radius_nm, DIFF_BINS + 1)  # |dx|, |dy| of linked consecutive localizations
    diff_hist = np.zeros((JACKKNIFE, DIFF_BINS))
    pic_edges = np.arange(0.0, PICASSO_D_MAX * camera_px + bin_nm / 2, bin_nm) if camera_px else np.zeros(1)
    pic_hist = np.zeros(len(pic_edges) - 1)
    u_hist = np.zeros(len(U_BINS) - 1)
    u2 = np.zeros((2, JACKKNIFE))  # sum of u² and count, per group of molecules
    s2 = np.zeros(2)
    sigma_hist = np.zeros(5001)  # 0.1 nm bins to 500 nm, for the median
    n_locs = n_mol = 0
    halves = np.zeros(2, np.int64)  # molecules in each half of the FRC split by molecule
    previous: EmitterTable | None = None  # the last frame of the previous chunk, for Picasso's pairs

    def take(step: Any) -> None:
        nonlocal n_locs, n_mol
        rows, group = step.rows, step.group
        n_locs += len(rows)
        n_mol += len(step.molecules)
        in_a = int(np.count_nonzero(molecule_half(step.molecules.group)))
        halves[:] += [in_a, len(step.molecules) - in_a]
        if len(rows) == 0:
            return
        by_molecule.add(rows, molecule_half(group))
        by_frames.add(rows, (rows["frame"] % 2) == 0)
        if has_sigma:
            sx, sy = rows["sigma_x"] * unit, rows["sigma_y"] * unit
            s2[:] += [np.sum(sx.astype(np.float64) ** 2), np.sum(sy.astype(np.float64) ** 2)]
            both = np.concatenate([sx, sy])
            np.add.at(sigma_hist, np.clip((both * 10).astype(np.int64), 0, 5000), 1)
        p = step.pairs
        lag1 = p.lag == 1
        d = np.hypot(p.dx[lag1], p.dy[lag1]) * unit
        bucket = (p.group[lag1] % JACKKNIFE).astype(np.int64)
        idx = np.searchsorted(nena_edges, d, side="right") - 1
        ok = (idx >= 0) & (idx < link_hist.shape[1])
        np.add.at(link_hist, (bucket[ok], idx[ok]), 1)
        for diff in (p.dx[lag1], p.dy[lag1]):  # per-axis differences, for the robust scale
            j = np.searchsorted(diff_edges, np.abs(diff) * unit, side="right") - 1
            inside = (j >= 0) & (j < diff_hist.shape[1])
            np.add.at(diff_hist, (bucket[inside], j[inside]), 1)
            diff_hist[:, -1] += np.bincount(bucket[~inside], minlength=JACKKNIFE)  # beyond: counted, last bin
        if has_sigma:
            for diff, s in ((p.dx[lag1], p.sx[lag1]), (p.dy[lag1], p.sy[lag1])):
                u = normalized_difference(diff, s[:, 0], s[:, 1], rho1)
                u_hist[:] += np.histogram(u, U_BINS)[0]
                u = _jumps_as_independent(u, diff, s[:, 0], s[:, 1], rho1)  # the σ scale's u
                fine = np.isfinite(u)
                u2[0] += np.bincount(bucket[fine], weights=u[fine] ** 2, minlength=JACKKNIFE)
                u2[1] += np.bincount(bucket[fine], minlength=JACKKNIFE)

    for table in iter_localizations(path, pixel_size=unit, chunk_rows=WORK_ROWS):
        chance.add(table["x"], table["y"], table["frame"])
        for step in linker.feed(table):
            take(step)
            if camera_px:
                previous = _picasso_pairs(step.rows, previous, camera_px / unit, unit, pic_edges, pic_hist)
    last = linker.finish()
    take(last)
    if camera_px:
        _picasso_pairs(last.rows, previous, camera_px / unit, unit, pic_edges, pic_hist)

    sigma_rms = tuple(float(np.sqrt(v / n_locs)) for v in s2) if has_sigma and n_locs else None
    sigma_median = _hist_median(sigma_hist, 0.1) if has_sigma else None
    start = float(np.median([sigma_rms])) if sigma_rms else radius_nm / 6
    nena = _linked_nena(nena_edges, link_hist, diff_edges, diff_hist, rho1)
    pic_centers = pic_edges[:-1] + bin_nm / 2
    pic_fit = fit_nena(pic_centers, pic_hist, sigma_median if sigma_median else start)
    nena_picasso = Nena(None if pic_fit is None else float(pic_fit[1]), None, pic_centers, pic_hist,
                        None if pic_fit is None else nena_model(pic_centers, *pic_fit), int(pic_hist.sum()),
                        "Picasso's NeNA: all consecutive-frame pairs within 1 camera px, Picasso's model and starts"
                        if camera_px else "Picasso's NeNA: n/a, the file records no camera pixel size (--pixel_size)")
    sigma_check = 1.4826 * _hist_median_abs(u_hist) if has_sigma and u_hist.sum() else None
    scale, scale_unc = _sigma_scale(u2) if has_sigma else (None, None)
    crowding = chance.result()
    if crowding.crowded:
        warnings.warn(crowding.warning(path), stacklevel=2)
    if crowding.dense:
        warnings.warn(crowding.dense_warning(path), stacklevel=2)
    frc = by_molecule.frc("molecules (a molecule's localizations in one half)")
    if frc is not None:
        frc = replace(frc, withheld=frc_withheld(frc, (int(halves[0]), int(halves[1])), crowding.dense))
    return NoTruthResult(str(path), n_locs, n_mol, sigma_rms, sigma_median, nena, nena_picasso, sigma_check,
                         scale, scale_unc, correlation, radius_nm, frc, by_frames.frc("alternating frames"), crowding)


def normalized_difference(diff: np.ndarray, sigma_a: np.ndarray, sigma_b: np.ndarray, rho: float) -> np.ndarray:
    """The σ check's ``u``: a per-axis difference of two localizations of one molecule over the standard deviation
    their σ and error correlation ``rho`` predict for it, ``sqrt(σ_a² + σ_b² − 2ρ σ_a σ_b)`` (1 when they hold)."""
    var = sigma_a**2 + sigma_b**2 - 2 * rho * sigma_a * sigma_b
    return diff / np.sqrt(np.maximum(var, 1e-30))


def scale_difference(diff: np.ndarray, sigma_a: np.ndarray, sigma_b: np.ndarray, rho: float) -> np.ndarray:
    """The σ scale's ``u``: ``normalized_difference``, except a jump (``|u| > JUMP``: a blend of two emitters
    giving way to one of them, a gross error next to a good position) is divided by what independent errors
    predict, ``sqrt(σ_a² + σ_b²)``: its two ends are two states, not one error that ρ carries from frame to frame,
    and dividing it by ρ's smaller prediction would read it as a larger error than either end has."""
    return _jumps_as_independent(normalized_difference(diff, sigma_a, sigma_b, rho), diff, sigma_a, sigma_b, rho)


def _jumps_as_independent(u: np.ndarray, diff: np.ndarray, sigma_a: np.ndarray, sigma_b: np.ndarray,
                          rho: float) -> np.ndarray:
    """``u`` (``normalized_difference`` of these) with its jumps divided by what independent errors predict."""
    jump = np.abs(u) > JUMP
    if rho and jump.any():
        u = u.copy()
        u[jump] = normalized_difference(diff[jump], sigma_a[jump], sigma_b[jump], 0.0)
    return u


def _linked_nena(edges: np.ndarray, hist: np.ndarray, diff_edges: np.ndarray, diff_hist: np.ndarray,
                 rho1: float) -> Nena:
    """The per-axis precision from linked consecutive localizations: 1.4826 x the median |dx|, |dy| (robust)
    / sqrt(2 (1 - ρ1)); the jackknife over the groups of molecules for its uncertainty. The distance
    histogram comes with the NeNA density of that precision (for the figure)."""
    scale = 1.4826 / math.sqrt(2.0 * (1.0 - rho1))
    centers = (edges[:-1] + edges[1:]) / 2
    total = hist.sum(axis=0)
    note = (f"linked consecutive localizations: 1.4826 x median |dx|, |dy| / sqrt(2 (1 - {rho1:.2f})), the "
            f"localizer's consecutive-frame error correlation; NeNA's fit of the same distances reads low where "
            f"precisions differ")
    all_diffs = diff_hist.sum(axis=0)
    if all_diffs.sum() < 3:
        return Nena(None, None, centers, total, None, int(total.sum()), note)
    value = _hist_quantile(diff_edges, all_diffs, 0.5) * scale
    leave_out = [_hist_quantile(diff_edges, all_diffs - diff_hist[k], 0.5) * scale for k in range(len(diff_hist))
                 if (all_diffs - diff_hist[k]).sum() >= 3]
    g = len(leave_out)
    unc = float(np.sqrt((g - 1) / g * np.sum((np.array(leave_out) - np.mean(leave_out)) ** 2))) if g > 2 else None
    s2 = 2.0 * (value * math.sqrt(1.0 - rho1)) ** 2  # the NeNA density of this precision, for the figure
    width = float(edges[1] - edges[0])
    fit = total.sum() * width * centers / s2 * np.exp(-(centers**2) / (2 * s2))
    return Nena(value, unc, centers, total, fit, int(total.sum()), note)


def _sigma_scale(u2: np.ndarray) -> tuple[float | None, float | None]:
    """RMS of the σ check's u over all groups, and its delete-one jackknife uncertainty."""
    total, n = u2[0].sum(), u2[1].sum()
    if n < 3:
        return None, None
    value = math.sqrt(total / n)
    leave_out = [math.sqrt((total - u2[0, k]) / (n - u2[1, k])) for k in range(u2.shape[1]) if n - u2[1, k] >= 3]
    g = len(leave_out)
    unc = float(np.sqrt((g - 1) / g * np.sum((np.array(leave_out) - np.mean(leave_out)) ** 2))) if g > 2 else None
    return value, unc


def _hist_quantile(edges: np.ndarray, counts: np.ndarray, q: float) -> float:
    """The ``q`` quantile of values histogrammed in ``counts`` over ``edges`` (linear within a bin)."""
    c = np.concatenate([[0.0], np.cumsum(counts)])
    target = q * c[-1]
    i = int(np.clip(np.searchsorted(c, target, side="right") - 1, 0, len(counts) - 1))
    frac = (target - c[i]) / counts[i] if counts[i] > 0 else 0.0
    return float(edges[i] + frac * (edges[i + 1] - edges[i]))


def _picasso_pairs(rows: EmitterTable, previous: EmitterTable | None, d_max: float, unit: float,
                   edges: np.ndarray, hist: np.ndarray) -> EmitterTable | None:
    """Add every pair of consecutive-frame localizations within ``d_max`` (table units) to Picasso's
    histogram; returns the rows of the last frame (the next chunk's pairs start there)."""
    if len(rows) == 0:
        return previous
    both = rows if previous is None else EmitterTable.concat([previous, rows])
    x, y, f = both["x"].astype(np.float64), both["y"].astype(np.float64), both["frame"]
    a, b = candidate_pairs(x, y, f, d_max, 1)
    d = np.hypot(x[a] - x[b], y[a] - y[b])
    d = d[d <= d_max] * unit
    hist += np.histogram(d, edges)[0]
    last = rows["frame"][-1]
    return rows.select(rows["frame"] == last)


def _hist_median(hist: np.ndarray, width: float) -> float | None:
    if hist.sum() == 0:
        return None
    c = np.cumsum(hist)
    return float((np.searchsorted(c, c[-1] / 2) + 0.5) * width)


def _hist_median_abs(hist: np.ndarray) -> float:
    centers = (U_BINS[:-1] + U_BINS[1:]) / 2
    order = np.argsort(np.abs(centers), kind="stable")
    c = np.cumsum(hist[order])
    return float(np.abs(centers[order])[np.searchsorted(c, c[-1] / 2)])


def _extent(path: Path, unit: float) -> tuple[int, int]:
    """(H, W) in table units covering every localization (a file without a recorded frame size)."""
    hi = np.zeros(2)
    for t in iter_localizations(path, pixel_size=unit):
        if len(t):
            hi = np.maximum(hi, [float(np.nanmax(t["y"])), float(np.nanmax(t["x"]))])
    if not np.all(np.isfinite(hi)):
        raise StackError(f"{path}: localizations with no finite position")
    return int(hi[0]) + 2, int(hi[1]) + 2


def quality_rows(d: dict[str, Any]) -> list[tuple[str, str]]:
    """The report's rows for ``NoTruthResult.as_dict()`` (also as read back from ``<stem>_quality.json``)."""

    def nm(v: float | None, unc: float | None = None) -> str:
        if v is None:
            return "n/a"
        return f"{v:.2f} ± {unc:.2f} nm" if unc is not None else f"{v:.2f} nm"

    rho = d["error_correlation"]
    rows = [("localizations, molecules (linked at the link radius below, no sigma gate)",
             f"{d['localizations']}, {d['molecules']}"),
            ("precision per axis: RMSE estimate (RMS predicted σ × σ scale × unseen-error factor)",
             nm(d["precision_nm"])),
            ("RMS predicted σ (the core of the errors)", nm(d.get("sigma_precision_nm"))),
            ("σ scale (RMS of consecutive differences / predicted)",
             "n/a" if d.get("sigma_scale") is None else f"{d['sigma_scale']:.2f}"
             + ("" if d.get("sigma_scale_uncertainty") is None else f" ± {d['sigma_scale_uncertainty']:.2f}")),
            ("unseen-error factor (the localizer's RMSE the differences do not see, measured on simulations)",
             "n/a" if d.get("unseen_error_factor") is None else f"{d['unseen_error_factor']:.2f}"),
            ("median predicted σ", nm(d["sigma_median_nm"])),
            ("NeNA of linked molecules, corrected for the error correlation",
             nm(d["nena_nm"], d["nena_uncertainty_nm"])),
            ("NeNA as Picasso computes it (reads low by √(1 − ρ))", nm(d["nena_picasso_nm"])),
            ("σ check (consecutive differences / predicted; 1 = consistent)",
             "n/a" if d["sigma_check"] is None else f"{d['sigma_check']:.2f}"),
            ("error correlation ρ (lag 1, 2, beyond)",
             f"{', '.join(f'{v:.2f}' for v in rho['by_lag'])}, {rho['beyond']:.2f} ({rho['source']})"),
            ("link radius of this quality pass (fixed, no sigma gate)", nm(d["link_radius_nm"])),
            (f"chance neighbours: localizations with another within that radius "
             f"{d.get('chance_neighbour_lag_frames', LAG)} frames earlier; multi-frame blinks a link can join to one",
             _crowding_text(d))]
    for key in ("frc_molecule_split", "frc_frame_split"):
        if d.get(key):
            withheld = d[key].get("withheld")
            rows.append((f"FRC resolution, halves by {d[key]['split']}",
                         f"not a resolution: {withheld}" if withheld else nm(d[key]["resolution_nm"])))
    return rows


def quality_line(d: dict[str, Any]) -> str:
    """The console's line for ``NoTruthResult.as_dict()``: only numbers that are what they are called; the FRC
    resolution where it is one, else why not, in words."""
    def nm(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.2f} nm"

    frc = d.get("frc_molecule_split")
    if not frc:
        frc_text = "FRC n/a (one half of the localizations is empty)"
    elif frc.get("withheld"):
        frc_text = f"no FRC resolution: {frc['withheld']}"
    else:
        frc_text = f"FRC resolution {nm(frc['resolution_nm'])} (halves by molecule)"
    scale = "n/a" if d.get("sigma_scale") is None else f"{d['sigma_scale']:.2f}"
    factor = "n/a" if d.get("unseen_error_factor") is None else f"{d['unseen_error_factor']:.2f}"
    return (f"{d['localizations']} localizations, {d['molecules']} molecules; precision {nm(d['precision_nm'])} "
            f"(RMSE estimate: RMS predicted σ {nm(d.get('sigma_precision_nm'))} x σ scale {scale} x unseen-error "
            f"factor {factor}), NeNA {nm(d['nena_nm'])} ± {nm(d['nena_uncertainty_nm'])} (linked, corrected), "
            f"Picasso's NeNA {nm(d['nena_picasso_nm'])}; {frc_text}")


def _crowding_text(d: dict[str, Any]) -> str:
    rate, join = d.get("chance_neighbour_rate"), d.get("joinable_fraction")
    if rate is None or join is None:
        return "n/a"
    return (f"{100 * rate:.2f} %; {100 * join:.1f} %"
            + (" (crowded for linking: the σ scale and molecule counts are less reliable)"
               if d.get("crowded_for_linking") else "")
            + ("; dense: the FRC resolution reads finer than the localizations resolve" if d.get("dense") else ""))


def quality_of(result: NoTruthResult, label: str) -> Any:
    """The report's section for ``result`` (``report.Quality``): the numbers as text, FRC curves, NeNA
    histograms."""
    from decode_mem.report import Quality

    rho = result.correlation
    frcs = [f for f in (result.frc_molecules, result.frc_frames) if f is not None]
    return Quality(label, quality_rows(result.as_dict()),
                   frc=[(f"split by {f.split.split(' (')[0]}", f.frequency, f.curve, f.stated) for f in frcs],
                   nena=[("linked, corrected", result.nena.centers / math.sqrt(1 - rho.consecutive),
                          result.nena.counts, result.nena.fit, result.nena.value),
                         ("Picasso", result.nena_picasso.centers, result.nena_picasso.counts, result.nena_picasso.fit,
                          result.nena_picasso.value)])


def write_quality(result: NoTruthResult, out_dir: str | os.PathLike, stem: str,
                  json_path: str | os.PathLike | None = None) -> tuple[Path, Path]:
    """``out_dir/<stem>_quality.json`` (``as_dict``, NaN as null; at ``json_path`` where given) and
    ``out_dir/<stem>_quality.png`` (FRC and NeNA), atomically."""
    import json

    from decode_mem.io.atomic import atomic_output
    from decode_mem.report.figures import quality_png

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    js = Path(json_path) if json_path is not None else out_dir / f"{stem}_quality.json"
    png = out_dir / f"{stem}_quality.png"
    with atomic_output(js) as tmp:
        tmp.write_text(json.dumps(result.as_dict(), indent=2, allow_nan=False) + "\n")
    with atomic_output(png) as tmp:
        tmp.write_bytes(quality_png(quality_of(result, stem)))
    return js, png
