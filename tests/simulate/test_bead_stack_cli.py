"""``simulate --beads N`` / ``--bead_xy CSV`` with ``--z_step``: one channel's bead z-stack for ``psf``, its beads'
places as truth; bad requests one line, exit 2, nothing written."""

from __future__ import annotations

import numpy as np
import tifffile

from decode_mem.simulate.__main__ import main
from decode_mem.simulate.beads import bead_grid


def test_a_bead_stack_on_a_grid_or_at_given_places(tmp_path, capsys) -> None:
    out, gt = tmp_path / "beads.tif", tmp_path / "beads.csv"
    assert main(["--psf", "astig3d", "--size", "96", "128", "--beads", "6", "--z_step", "50", "--frames", "9",
                 "--z_range", "-200", "200", "--out", str(out), "--gt", str(gt)]) == 0
    stack = tifffile.imread(out)
    assert stack.shape == (9, 96, 128) and stack.dtype == np.uint16
    places = np.loadtxt(gt, delimiter=",", skiprows=1)
    x, y = bead_grid(6, (96, 128))
    assert np.allclose(places, np.column_stack([(x + 0.5) * 100, (y + 0.5) * 100]), atol=0.01)
    # the brightest pixel of the in-focus plane sits at a bead
    r, c = np.unravel_index(np.argmax(stack[4]), stack.shape[1:])
    assert np.hypot(x - c, y - r).min() < 2
    (tmp_path / "xy.csv").write_text("x,y\n20,30\n100.5,60\n")
    assert main(["--psf", "astig3d", "--size", "96", "128", "--bead_xy", str(tmp_path / "xy.csv"), "--z_step", "50",
                 "--frames", "3", "--out", str(tmp_path / "two.tif")]) == 0
    assert tifffile.imread(tmp_path / "two.tif")[1, 30, 20] > tifffile.imread(tmp_path / "two.tif")[1, 80, 60]
    capsys.readouterr()


def test_bad_bead_requests_are_one_line_and_write_nothing(tmp_path, capsys) -> None:
    out = tmp_path / "beads.tif"
    (tmp_path / "far.csv").write_text("500,10\n")
    for argv, words in (([], "--z_step"), (["--z_step", "50"], "--beads N or --bead_xy"),
                        (["--z_step", "50", "--beads", "4", "--psf", "gauss2d"], "3-D PSF"),
                        (["--z_step", "50", "--bead_xy", str(tmp_path / "far.csv")], "outside the 64x64 px frame")):
        base = ["--psf", "astig3d", "--frames", "3", "--out", str(out)] if "--psf" not in argv else ["--frames", "3",
                                                                                                    "--out", str(out)]
        beads = [] if any(a in argv for a in ("--beads", "--bead_xy")) or words == "--beads N or --bead_xy" \
            else ["--beads", "4"]
        assert main(base + beads + argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and words in err, err
        assert not out.exists()
