"""``python -m decode_mem.simulate``: write a synthetic SMLM stack (TIFF or zarr) and its ground truth (CSV).

Thin layer: parse -> ``SimulationConfig`` -> ``simulate_stack``. Errors a user can fix print
``error: ...`` on stderr and exit with status 2 (``decode_mem.cli``).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from decode_mem.cli import add, new_parser, progress_bars, run
from decode_mem.config import load_yaml
from decode_mem.errors import ConfigError
from decode_mem.io.camera import camera_fields, preset, with_fields
from decode_mem.simulate.config import SimulationConfig


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("decode_mem.simulate", "Simulate a blinking-emitter SMLM movie block by block (bounded memory) "
                                          "and write it as uint16 TIFF or zarr v3, with the ground truth as a "
                                          "ThunderSTORM CSV."
                   "\n\nExample: python -m decode_mem.simulate --frames 1000 --size 64 64 --out sim.tif --gt "
                   "gt.csv\nExit codes: 0 done, 2 bad settings or input (one line on stderr naming the file and"
                   " the problem; nothing written), 130 / 143 stopped by Ctrl-C / SIGTERM (what reached disk is"
                   " kept).")
    p.add_argument("--frames", type=int, required=True, help="number of frames T")
    p.add_argument("--out", required=True, help="output stack: *.tif, *.tiff or *.zarr")
    p.add_argument("--gt", help="ground-truth CSV (ThunderSTORM columns, 1-based frames, nm)")
    add(p, "--camera_out", help="write the movie's camera as YAML for `infer --camera` (sCMOS maps beside it)")
    p.add_argument("--config", help="YAML with SimulationConfig keys (top level or under 'simulation'); "
                                    "the options below override it")
    add(p, "--size", "--frame_size", dest="size", type=int, nargs=2, metavar=("H", "W"),
        help="frame size in px (default 64 64)")
    p.add_argument("--density", type=float, help="emitters visible per frame per µm² (default 1.0)")
    p.add_argument("--psf", help="gauss2d (default), astig3d, spline (with --psf_file) or pupil (settings: --config)")
    add(p, "--psf_file", help="PSF file for --psf spline (python -m decode_mem.psf)")
    add(p, "--sigma", "--psf_sigma", dest="sigma", type=float, help="PSF σ0 in px (default 1.0)")
    add(p, "--z_range", type=float, nargs=2, metavar=("LOW", "HIGH"), help="z range in nm for 3-D PSFs "
                                                                            "(default -750 750)")
    p.add_argument("--camera", help="emccd (default: challenge-like EMCCD), scmos or a camera YAML (docs/cameras.md)")
    add(p, "--pixel_size", type=float, help="camera pixel in nm")
    p.add_argument("--photons", type=float, nargs=2, metavar=("MEAN", "STD"),
                   help="emitter flux in photons per full frame (default 5000 1500)")
    p.add_argument("--bg", type=float, nargs="+", metavar="PHOTONS",
                   help="background photons/px: one value, or LOW HIGH to draw the level (default 100)")
    add(p, "--bg_mode", help="uniform (default), smooth, cell or mixed")
    add(p, "--on_time", type=float, help="mean on-time in frames (default 2)")
    p.add_argument("--margin", type=float, help="px around the frame where emitters are placed too (default 3)")
    p.add_argument("--structure", help="none (default: uniform emitters), filaments, rings or grids: fixed sites "
                                       "that blink repeatedly")
    add(p, "--off_time", type=float, help="structures: mean dark time of a site between blinks, frames "
                                          "(default 200)")
    add(p, "--drift_nm", type=float, help="smooth stage drift of about this many nm per --drift_frames, recorded "
                                          "in <gt stem>_drift.csv (default 0)")
    add(p, "--drift_frames", type=float, help="the drift's time scale in frames (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="random seed, an integer (default 0)")
    p.add_argument("--block", type=int, help="frames simulated and written at a time (default: ~4 M pixels)")
    p.add_argument("--device", default="cpu", help="auto | cpu | cuda | cuda:N (default cpu: a seed gives the same "
                                                   "movie on every machine, which CUDA's random numbers would not)")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    two = p.add_argument_group("two colours (docs/two_colour.md; YAML: a 'two_colour' section beside 'simulation')")
    add(two, "--two_colour", metavar="LAYOUT",
        help="a two-colour movie: left-right, right-left, top-bottom, bottom-top (a split view: --out holds both "
             "halves of --size each) or two-files (two cameras: <out stem>_ch1.tif and _ch2.tif); truth beside --gt: "
             "<gt> (channel 1's px, dye), <gt stem>_ch1.csv, _ch2.csv, _mapping.json")
    add(two, "--dyes", help="NAME=RATIO,... the share of each dye's photons in channel 2 (default dye1=0,dye2=1: one "
                            "dye per channel; ratiometric e.g. A=0.3,B=0.5,C=0.7)")
    add(two, "--distortion_nm", type=float, help="largest non-linear displacement between the channels over the "
                                                 "field, nm (default 300; plus a small rotation, scale and shift)")
    add(two, "--axial_offset", type=float, help="channel 2 focuses this many nm deeper (3-D PSFs; default 0)")
    add(two, "--beads", type=int, metavar="N",
        help="a bead slide for python -m decode_mem.register: N beads seen in both channels, --frames frames "
             "(--photons MEAN: photons per bead and frame, default 40000)")
    add(two, "--z_step", type=float, help="with --beads and a 3-D PSF: a z-stack, frame k at z_range's low end + "
                                          "k * z_step nm")
    beads = p.add_argument_group("a bead z-stack of one channel (for python -m decode_mem.psf; a PSF that changes "
                                 "across the field: 'pupil_field' in the YAML)")
    add(beads, "--bead_xy", metavar="CSV", help="beads at these places: a CSV of x, y in px (pixel centres at "
        "integers), one bead a row; or --beads N for N beads on a grid over the frame")
    return p


def two_colour_from_args(args: argparse.Namespace) -> Any:  # -> TwoColourConfig or None (imported lazily)
    """The two-colour settings of the YAML's 'two_colour' section and the flags, or None for one channel."""
    from decode_mem.simulate.colours import TwoColourConfig

    params: dict[str, Any] = {}
    if args.config:
        loaded = load_yaml(args.config)
        section = loaded.get("two_colour")
        if section is not None and not isinstance(section, dict):
            raise ConfigError(f"{args.config}: section 'two_colour' must be a mapping of keys to values")
        params = dict(section or {})
    for arg, key in (("two_colour", "layout"), ("dyes", "dyes"), ("distortion_nm", "distortion_nm"),
                     ("axial_offset", "axial_offset")):
        if getattr(args, arg) is not None:
            params[key] = getattr(args, arg)
    if not params:  # --beads / --z_step without --two_colour: one channel's bead z-stack (_beads)
        return None
    return TwoColourConfig.from_dict(params)


def config_from_args(args: argparse.Namespace) -> SimulationConfig:
    params: dict[str, Any] = {}
    if args.config:
        params = load_yaml(args.config, section="simulation")
        params.pop("two_colour", None)  # its own section (two_colour_from_args)
    direct = {"size": "frame_size", "density": "density", "psf": "psf", "psf_file": "psf_file", "sigma": "psf_sigma",
              "z_range": "z_range", "bg_mode": "bg_mode", "on_time": "on_time", "margin": "margin",
              "drift_nm": "drift_nm", "drift_frames": "drift_frames"}
    for arg, key in direct.items():
        value = getattr(args, arg)
        if value is not None:
            params[key] = value
    if args.structure is not None or args.off_time is not None:
        structure = params.get("structure") or {}
        structure = {"kind": structure} if isinstance(structure, str) else dict(structure)
        if args.structure is not None:
            structure["kind"] = args.structure
        if args.off_time is not None:
            structure["off_time"] = args.off_time
        params["structure"] = structure
    if args.photons is not None:
        params["photons_mean"], params["photons_std"] = args.photons
    if args.bg is not None:
        if len(args.bg) > 2:
            raise ConfigError(f"--bg takes one value or LOW HIGH, got {len(args.bg)} values")
        params["bg"] = args.bg if len(args.bg) == 2 else args.bg[0]
    if args.camera is not None or args.pixel_size is not None:
        camera = params.get("camera", "emccd") if args.camera is None else args.camera
        if isinstance(camera, str):  # a preset or a camera YAML, as in every job
            fields = camera_fields(camera)
            camera = with_fields(preset(fields.get("kind", "emccd")), fields).to_dict()
        camera = dict(camera)
        if args.pixel_size is not None:
            camera["pixel_size"] = args.pixel_size
        params["camera"] = camera
    return SimulationConfig.from_dict(params)


def main(argv: list[str] | None = None) -> int:
    def body(args: argparse.Namespace) -> None:
        config = config_from_args(args)
        two_colour = two_colour_from_args(args)
        if args.threads is not None and args.threads < 1:
            raise ConfigError(f"--threads must be >= 1, got {args.threads}")
        if args.frames < 1:  # before the progress bar: a bad setting is one line
            raise ConfigError(f"--frames must be >= 1, got {args.frames}")
        if args.block is not None and args.block < 1:
            raise ConfigError(f"--block must be >= 1, got {args.block}")
        import torch  # heavy imports after parsing: --help and usage errors stay fast
        from tqdm.auto import tqdm

        from decode_mem.simulate.stack import simulate_stack

        if args.threads is not None:
            torch.set_num_threads(args.threads)
        if two_colour is not None:
            return _two_colour(args, config, two_colour)
        if args.beads is not None or args.bead_xy is not None or args.z_step is not None:
            return _beads(args, config)
        start = time.perf_counter()
        with tqdm(total=args.frames, unit=" frames", desc="simulate", disable=not progress_bars(args.quiet)) as bar:
            result = simulate_stack(config, args.frames, args.out, args.gt, seed=args.seed, block=args.block,
                                    device=args.device, camera_out=args.camera_out, progress=bar.update)
        if not args.quiet:
            t = result.shape[0]
            seconds = time.perf_counter() - start
            print(f"wrote {result.out} {result.shape} uint16 ({t / seconds:.0f} frames/s)"
                  + (f" and {result.gt} ({result.n_localizations} ground-truth rows)" if result.gt else "")
                  + (f"; camera {result.camera}" if result.camera else "")
                  + (f"; true drift {result.drift}" if result.drift else ""))

    return run(build_parser(), body, argv, outputs={"out": "path", "gt": "file", "camera_out": "file"})


def _beads(args: argparse.Namespace, config: SimulationConfig) -> None:
    """One channel's bead z-stack (``simulate.beads.write_bead_stack``); its truth (the beads' places) at --gt."""
    from decode_mem.simulate.beads import bead_grid, read_bead_places, write_bead_stack

    if args.z_step is None or not args.z_step > 0:
        raise ConfigError(f"a bead z-stack needs --z_step > 0 nm, got {args.z_step}")
    if not config.is_3d:
        raise ConfigError(f"a bead z-stack needs a 3-D PSF (--psf astig3d, spline or pupil), got {config.psf!r}")
    if (args.beads is None) == (args.bead_xy is None):
        raise ConfigError("a bead z-stack: give --beads N or --bead_xy CSV (one of them)")
    if args.beads is not None and args.beads < 1:
        raise ConfigError(f"--beads must be >= 1, got {args.beads}")
    x, y = read_bead_places(args.bead_xy, config.frame_size) if args.bead_xy else bead_grid(
        args.beads, config.frame_size, seed=args.seed)
    photons = args.photons[0] if args.photons is not None else 40000.0
    out = write_bead_stack(config, x, y, args.frames, args.z_step, args.out, args.gt, photons=photons, seed=args.seed)
    if not args.quiet:
        print(f"wrote {out} ({args.frames} planes {args.z_step:g} nm apart from {config.z_range[0]:g} nm, "
              f"{len(x)} beads)" + (f" and {args.gt} (their places)" if args.gt else ""))


def _two_colour(args: argparse.Namespace, config: SimulationConfig, two_colour: Any) -> None:
    """A two-colour movie or bead slide (``simulate.two_colour``)."""
    import numpy as np

    from decode_mem.simulate.two_colour import simulate_bead_slide, simulate_two_colour

    if args.camera_out:
        raise ConfigError("--camera_out: not for two-colour movies (both channels use the --camera given)")
    if args.beads is not None or args.bead_xy is not None:
        from decode_mem.simulate.beads import read_bead_places

        if args.beads is not None and args.bead_xy is not None:
            raise ConfigError("a bead slide: give --beads N or --bead_xy CSV (one of them)")
        if args.beads is not None and args.beads < 1:
            raise ConfigError(f"--beads must be >= 1, got {args.beads}")
        places = read_bead_places(args.bead_xy, config.frame_size) if args.bead_xy else None
        n_beads = len(places[0]) if places is not None else args.beads
        z = None
        if args.z_step is not None:
            if not args.z_step > 0:
                raise ConfigError(f"--z_step must be > 0 nm, got {args.z_step}")
            z = config.z_range[0] + args.z_step * np.arange(args.frames)
        photons = args.photons[0] if args.photons is not None else 40000.0
        result = simulate_bead_slide(config, two_colour, args.out, args.gt, n_beads=n_beads, positions=places,
                                     frames=args.frames, z=z, photons=photons, seed=args.seed)
        what = f"{n_beads} beads"
    else:
        result = simulate_two_colour(config, two_colour, args.frames, args.out, args.gt, seed=args.seed,
                                     block=args.block, device=args.device)
        what = f"{result.n_localizations} ground-truth rows"
    if not args.quiet:
        print(f"wrote {', '.join(map(str, result.movies))} ({two_colour.layout}, channel frames {result.shape})"
              + (f"; truth ({what}) in {', '.join(str(p) for p in result.truth.values())}" if result.truth else ""))


if __name__ == "__main__":
    sys.exit(main())
