"""infer and the damage budget: a movie whose repaired frames would be more than 5 % of it is refused in one line
naming it and saying how much is damaged, not localized as flat frames; ``--max_damage`` sets another share."""

from __future__ import annotations

import numpy as np

from decode_mem.infer.__main__ import main


def test_a_movie_damaged_beyond_the_budget_is_refused_and_max_damage_lets_it_through(tmp_path, capsys):
    movie = (100 + np.random.default_rng(0).poisson(20, (12, 16, 16))).astype("float32")
    movie[5] = np.nan  # 1 of 12 frames: 8 %
    np.save(tmp_path / "movie.npy", movie)
    args = [str(tmp_path / "movie.npy"), "--engine", "torch", "--camera", "scmos"]
    assert main([*args, "--out", str(tmp_path / "refused")]) != 0
    said = capsys.readouterr().err
    line = next(line for line in said.splitlines() if "frames are damaged" in line)
    assert str(tmp_path / "movie.npy") in line and "1 of its 12 frames are damaged (8.3%" in line
    assert "--max_damage" in line
    assert not (tmp_path / "refused" / "movie.csv").exists()
    assert main([*args, "--out", str(tmp_path / "let"), "--max_damage", "0.1"]) == 0
    assert (tmp_path / "let" / "movie.csv").is_file()


def test_max_damage_with_follow_is_refused_in_one_line_before_any_work(tmp_path, capsys):
    """A followed file grows: its share of repaired frames is not known until it is complete, so the budget cannot
    be applied; the flag is refused, not accepted and ignored."""
    movie = (100 + np.random.default_rng(0).poisson(20, (4, 16, 16))).astype("uint16")
    np.save(tmp_path / "movie.npy", movie)
    code = main([str(tmp_path / "movie.npy"), "--follow", "--max_damage", "0.1", "--out", str(tmp_path / "o")])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "max_damage" in err[0] and "complete" in err[0]
    assert not (tmp_path / "o").exists()
