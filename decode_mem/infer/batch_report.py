"""What an ``infer`` run adds beside its localizations: the drift correction of a stack (``--drift``), its linked
molecules (``--link``), its precision and resolution without ground truth (in its JSON summary, on the
drift-corrected localizations where there are some) and the batch's ``report.html`` (stacks, warnings,
memory, the first stack's images and drift, every stack's precision and resolution, command, versions).

The report's super-resolution image is a ``ReportImage`` filled from the emitters as they are written
(``runner``), never read back from the output files: the run's memory stays flat in the stack length."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.io.first_frames import FirstFramesMean
from decode_mem.io.localizations import FORMATS
from decode_mem.render.auto import MAX_SIDE as MAX_RENDER_SIDE  # px of the report's image: bounded memory

WIDEFIELD_FRAMES = 1000  # the report's widefield image: the mean of (at most) the first frames of the first stack


def correct_stack_drift(paths: Sequence[Path], out: Path) -> tuple[list[Path], dict[str, Any]]:
    """Drift-correct a stack's localization files (one estimate, from the first, applied to each):
    the files written and what the JSON summary records."""
    from decode_mem.drift import correct_file

    locs = [p for p in paths if p.suffix.lower() in FORMATS]
    first = correct_file(locs[0], out)
    written = [first.corrected, first.table, first.plot]
    for path in locs[1:]:
        written.append(correct_file(path, out, estimate=first.estimate).corrected)
    est = first.estimate
    span = est.dxdy.max(axis=0) - est.dxdy.min(axis=0)
    info = {"method": est.method, "segments": len(est.centers), "span_nm": [round(float(v), 2) for v in span],
            "table": first.table.name}
    return written, info


def assess_stack(paths: Sequence[Path], out: Path, pixel_size: float, link: bool,
                 model: Path | None = None) -> tuple[list[Path], dict[str, Any], bytes]:
    """Link (``link``) and measure the precision and resolution of a stack's localization files ``paths`` —
    their drift-corrected versions in ``out`` where ``--drift`` wrote them: the files written, what the JSON
    summary records (``decode_mem.evaluate.no_truth``: one pass over the first file, parquet or Picasso before
    CSV, whose readers are faster) and the report's figure (FRC and NeNA) as PNG bytes. ``model``: the checkpoint
    that localized them, whose error correlation linking and the precision take (``link.correlation.for_model``)."""
    from decode_mem.drift import corrected_path
    from decode_mem.evaluate.no_truth import assess_file, quality_of
    from decode_mem.link import for_model, link_file
    from decode_mem.report.figures import quality_png

    locs = [p for p in paths if p.suffix.lower() in FORMATS]
    locs = [corrected_path(p, out) if corrected_path(p, out).is_file() else p for p in locs]
    correlation = for_model(model)
    written: list[Path] = []
    info: dict[str, Any] = {}
    if link:
        for path in locs:
            res = link_file(path, out, pixel_size=pixel_size, correlation=correlation)
            written += [res.molecules_path, res.groups_path]
            info["link"] = {"molecules": res.molecules, "radius_nm": round(res.radius_nm, 3),
                            "sigma_gate": res.sigma_gate, "reach_nm": round(res.reach_nm, 3),
                            "radius": res.radius_source}
    fastest = [".parquet", ".pq", ".hdf5", ".h5", ".smlm", ".mat", ".csv", ".txt"]  # readers, fastest first
    first = sorted(locs, key=lambda p: fastest.index(p.suffix.lower()) if p.suffix.lower() in fastest else 99)[0]
    result = assess_file(first, pixel_size=pixel_size, correlation=correlation)
    info["quality"] = result.as_dict()
    return written, info, quality_png(quality_of(result, first.stem))


class ReportImage:
    """The report's super-resolution image of one stack, drawn from its emitters as they are written: ``add(table)``
    per block. As ``render`` draws a file (``render.image.Rendering``): each localization a Gaussian of its own
    precision, on pixels of about half the median precision of the first localizations (at most
    ``MAX_RENDER_SIDE`` on the longer side). Memory: 4/3 of the image (at most ``MAX_RENDER_SIDE``² float32), the
    first localizations until the pixel is chosen, whatever the number of localizations, and the widefield image's
    sums (one camera frame, 4 or 8 bytes a pixel, and a block's sum while it is added: ``io.first_frames``).

    Its first block also starts importing what drawing the report needs (matplotlib, scipy.ndimage) in a thread of
    its own (``report.figures.import_drawing_modules``): the report after the loop does not wait for it, and the
    engine's set-up before the first block does not share the interpreter with it."""

    def __init__(self, shape_px: tuple[int, int], pixel_size: float) -> None:
        from decode_mem.render.image import Rendering

        self.imports: threading.Thread | None = None  # started by the first block
        self.rendering = Rendering(shape_px=shape_px, pixel_size=pixel_size, max_side=MAX_RENDER_SIDE)
        # the widefield image: the stack's first frames as the run reads them (``Backend.emitters``), where it reads
        # them from frame 0 in this process (not resumed, no cluster); else the report reads them again
        self.widefield = FirstFramesMean(WIDEFIELD_FRAMES)

    def add(self, table: Any) -> None:
        """Draw one block's emitters (an ``EmitterTable``) into the image."""
        if self.imports is None:
            from decode_mem.report.figures import import_drawing_modules

            self.imports = import_drawing_modules()
        self.rendering.add(table)


def write_batch_report(out: Path, title: str, summaries: Sequence[Any], failures: Sequence[Any],
                       memory: Mapping[str, np.ndarray] | None, summary_rows: Sequence[tuple[str, str]],
                       command: str | None, pixel_size: float, superres: ReportImage | None = None,
                       quality_figures: Mapping[str, bytes] | None = None,
                       figures: Sequence[tuple[str, bytes]] = ()) -> Path:
    """``out/report.html`` of a batch: every stack's row, warnings, memory, command and versions, and for the
    first stack done with localizations its super-resolution image (``superres``, filled while it was written)
    beside its widefield image and, with ``--drift``, its drift; every stack's precision and resolution (its
    summary's ``quality`` and its figure in ``quality_figures``, by stem); ``figures``: (title, PNG) sections of their
    own (a two-colour run's ratio histograms)."""
    from decode_mem.io.drift import read_drift_csv
    from decode_mem.report import DriftCurve, ReportData, StackRow, write_report

    rows = [StackRow.from_summary(s) for s in summaries] + [StackRow.failed(f.stack, f.reason) for f in failures]
    warnings = [f"{Path(s.stack).name}: {w}" for s in summaries
                for w in (*filter(None, [s.extra.get("camera_warning")]), *s.extra.get("domain_warnings", ()))]
    warnings += [f"{Path(f.stack).name}: failed: {f.reason}" for f in failures]
    # the stack of the image: the first done now, else (every stack done before, ``--resume``) the first done before
    done = [s for s in summaries if not s.skipped and s.localizations > 0] or \
        [s for s in summaries if s.localizations > 0]
    images = drift = None
    if done:
        first = done[0]
        images = _images(first, superres, first.extra.get("camera", {}).get("pixel_size", pixel_size))
        if "drift" in first.extra:
            frames, dxdy = read_drift_csv(out / first.extra["drift"]["table"])
            method = first.extra["drift"]["method"]
            drift = DriftCurve(frames, dxdy, label=f"estimated drift of {first.stem} ({method})")
    quality = [q for s in summaries if not s.skipped and (q := _quality(s, quality_figures or {})) is not None]
    path = out / "report.html"
    files = [(Path(s.stack).name, out / name) for s in summaries for name in s.as_dict()["outputs"]]
    data = ReportData(title=title, summary=summary_rows, images=images, drift=drift, quality=quality, memory=memory,
                      stacks=rows, warnings=warnings, files=files, command=command, figures=tuple(figures))
    return write_report(path, data)


def _quality(summary: Any, figures: Mapping[str, bytes]) -> Any:
    """A stack's precision and resolution section: the numbers of its summary, its figure (None without)."""
    d = summary.extra.get("quality")
    if not d or summary.stem not in figures:
        return None  # before the import: 0.06 s of a run without --quality
    from decode_mem.evaluate.no_truth import quality_rows
    from decode_mem.report import Quality

    label = f"{Path(summary.stack).name} ({Path(d['file']).name})"
    return Quality(label, quality_rows(d), png=figures[summary.stem])


def _images(summary: Any, superres: ReportImage | None, pixel_size: float) -> Any:
    """The first stack's super-resolution image (``superres``; none when it was not kept) beside the mean of its
    first ``WIDEFIELD_FRAMES`` frames: summed as the run read them, else read again (reading the whole of a huge
    stack again would double the run's I/O)."""
    from decode_mem.io.stack import open_stack
    from decode_mem.render import mean_frame
    from decode_mem.report import Images

    frames = min(int(summary.extra.get("shape", [0])[0]), WIDEFIELD_FRAMES)
    widefield, summed = superres.widefield.mean() if superres is not None else (None, 0)
    if widefield is None or summed != frames:  # not summed as the run read them: read again
        settings = summary.extra.get("settings", {})  # opened as the run opened it (its series and damage share)
        with open_stack(summary.stack, series=settings.get("series"), max_damage=settings.get("max_damage")) as stack:
            frames = min(stack.shape[0], WIDEFIELD_FRAMES)
            widefield = mean_frame(stack, max_frames=frames)
    if superres is None:
        return Images(pixel_size, widefield, n_frames=frames)
    image = superres.rendering.image(consume=True)
    return Images(pixel_size, widefield, image, superres.rendering.render_pixel, frames, superres.rendering.n,
                  zoom="auto")
