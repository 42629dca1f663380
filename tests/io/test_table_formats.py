"""The field's localization tables in and out: SMAP ``_sml.mat``, ShareLoc ``.smlm``, DECODE ``.h5``, rapidSTORM
``.txt`` and ThunderSTORM's own CSV, beside decode_mem's CSV, Picasso and parquet.

Round trips decode_mem -> file -> decode_mem are equal to the last bit in what each file holds; the real tables
(tests/data/tables, from Locan's test data) read with their row counts, units and frames; each file is laid out as
its own tool reads it; bad files are one StackError naming the file."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
from io_tables import random_table

from decode_mem.errors import ConfigError, StackError
from decode_mem.io.decode_h5 import read_decode
from decode_mem.io.localizations import (
    convert_file,
    file_format,
    has_z,
    iter_localizations,
    localization_meta,
    open_writer,
    read_localizations,
    working_unit,
    write_localizations,
)
from decode_mem.io.rapidstorm import read_rapidstorm
from decode_mem.io.smap import read_smap
from decode_mem.io.smlm import read_smlm
from decode_mem.io.table import OPTIONAL, EmitterTable
from decode_mem.io.units import nm_from_table, table_from_nm

TABLES = Path(__file__).resolve().parents[1] / "data" / "tables"
REAL = Path(__file__).resolve().parents[1] / "data" / "real"
SMAP = TABLES / "smap" / "smap_dstorm_data.mat"
DECODE = TABLES / "decode" / "decode_dstorm_data.h5"
SMLM = TABLES / "smlm" / "SMLM_dstorm_data.smlm"
RAPID = TABLES / "rapidstorm" / "rapidSTORM_dstorm_data.txt"
THUNDER = TABLES / "thunderstorm" / "Thunderstorm_dstorm_data.csv"
PX = 107.3  # nm: not a round number, so that nm and pixels differ in every bit
WRITTEN = {"csv": ".csv", "picasso": ".hdf5", "decode": ".h5", "parquet": ".parquet", "smap": "_sml.mat",
           "smlm": ".smlm"}
EXACT = ("picasso", "decode", "parquet", "smap")  # float32 table -> file -> the same float32


def full_table(n: int = 2000, seed: int = 3) -> EmitterTable:
    rng = np.random.default_rng(seed)
    return random_table(n, seed, frames=300, width=119, height=89, prob=rng.uniform(0.1, 1, n),  # inside 120 x 90
                        sigma_x=rng.uniform(0.02, 0.6, n), sigma_y=rng.uniform(0.02, 0.6, n),
                        sigma_z=rng.uniform(5, 60, n), sigma_photons=rng.uniform(10, 300, n)).sorted_by_frame()


def write(table: EmitterTable, path: Path, **kw) -> Path:
    write_localizations(table, path, pixel_size=kw.pop("pixel_size", PX), width=120, height=90, frames=300, **kw)
    return path


@pytest.mark.parametrize("fmt", list(WRITTEN))
def test_round_trip_is_exact_in_what_the_file_holds(tmp_path: Path, fmt: str) -> None:
    t = full_table()
    path = write(t, tmp_path / f"locs{WRITTEN[fmt]}")
    assert file_format(path) == fmt
    back = read_localizations(path, pixel_size=PX)
    assert set(back.names) == set(t.names)
    assert np.array_equal(back["frame"], t["frame"])
    if fmt in EXACT:
        for name in t.names:
            assert np.array_equal(back[name], t[name]), name
    elif fmt == "smlm":  # float32 nm: the table's float32 positions through float32 nm, exactly that
        for c in ("x", "y"):
            nm32 = nm_from_table(t[c], PX, None).astype(np.float32)
            assert np.array_equal(back[c], table_from_nm(nm32, PX, None).astype(np.float32)), c
            s32 = (t[f"sigma_{c}"].astype(np.float64) * PX).astype(np.float32)
            assert np.array_equal(back[f"sigma_{c}"], (s32.astype(np.float64) / PX).astype(np.float32))
        for name in ("z", "photons", "bg", "prob", "sigma_z", "sigma_photons"):
            assert np.array_equal(back[name], t[name]), name
        again = write(back, tmp_path / "again.smlm")  # what a .smlm holds goes round unchanged
        assert np.array_equal(_smlm_records(again), _smlm_records(path))
    else:  # CSV: 4 decimals of nm and photons
        for name in t.names:
            np.testing.assert_allclose(back[name], t[name], rtol=1e-5, atol=1e-4, err_msg=name)
    assert localization_meta(path).pixel_size == (None if fmt == "csv" else PX)
    if fmt != "csv":
        assert localization_meta(path) == localization_meta(path).__class__(PX, 120, 90, 300)
    assert working_unit(path) == (PX if fmt in ("picasso", "decode") else 1.0)


def _smlm_records(path: Path) -> np.ndarray:
    with zipfile.ZipFile(path) as zf:
        return np.frombuffer(zf.read("table-0.bin"), np.uint8)


@pytest.mark.parametrize("fmt", ["smap", "smlm", "decode", "csv", "parquet"])
def test_two_colour_columns_go_round_too(tmp_path: Path, fmt: str) -> None:
    t = full_table(400)
    rng = np.random.default_rng(0)
    t = EmitterTable({**t.columns, "channel": rng.integers(0, 3, len(t)), "dye": rng.integers(0, 3, len(t)),
                      "ratio": rng.uniform(0, 1, len(t))})
    back = read_localizations(write(t, tmp_path / f"c{WRITTEN[fmt]}"), pixel_size=PX)
    for name in ("channel", "dye", "ratio"):
        np.testing.assert_allclose(back[name], t[name], atol=1e-6, err_msg=name)
    if fmt == "smap":  # SMAP's own channel field is its channel of a multi-channel file: left alone
        with h5py.File(tmp_path / "c_sml.mat") as f:
            assert "channel" not in f["saveloc/loc"] and "colour_channel" in f["saveloc/loc"]


@pytest.mark.parametrize("fmt", list(WRITTEN))
def test_a_table_in_nm_without_a_camera_pixel(tmp_path: Path, fmt: str) -> None:
    """What link and drift write from a file in nm: tables of 1 nm pixels, no camera pixel known. Files in nm
    keep the nm exactly (SMAP and parquet hold float64); files in camera pixels ask for the pixel, in one line."""
    t = full_table(300)
    nm_table = EmitterTable({**t.columns, **{c: nm_from_table(t[c], PX, None) - 0.5 for c in ("x", "y")}})
    path = tmp_path / f"nm{WRITTEN[fmt]}"
    if fmt in ("picasso", "decode"):
        with pytest.raises(ConfigError, match=r"camera pixel size \(--pixel_size, nm\)") as err:
            write(nm_table, path, pixel_size=None, unit=1.0)
        assert str(path) in str(err.value) and "\n" not in str(err.value)
        assert not path.exists() and not list(tmp_path.iterdir())
        return
    write(nm_table, path, pixel_size=None, unit=1.0)
    assert localization_meta(path).pixel_size is None and working_unit(path) == 1.0
    back = read_localizations(path)  # no pixel given or recorded: 1 nm pixels, the nm as written
    if fmt in ("smap", "parquet"):
        assert np.array_equal(back["x"], nm_table["x"]) and np.array_equal(back["y"], nm_table["y"])
    else:
        np.testing.assert_allclose(back["x"], nm_table["x"], atol=5e-3)


@pytest.mark.parametrize("fmt", ["smap", "decode", "picasso", "smlm", "parquet"])
def test_tables_in_nm_with_the_camera_pixel_known_go_into_camera_pixels(tmp_path: Path, fmt: str) -> None:
    t = full_table(300)
    nm_table = EmitterTable({**t.columns, **{c: nm_from_table(t[c], PX, None) - 0.5 for c in ("x", "y")},
                             **{c: t[c].astype(np.float64) * PX for c in ("sigma_x", "sigma_y")}})
    path = write(nm_table, tmp_path / f"c{WRITTEN[fmt]}", unit=1.0)
    back = read_localizations(path, pixel_size=PX)
    for c in ("x", "y", "sigma_x", "sigma_y"):
        np.testing.assert_allclose(back[c], t[c], atol=2e-5, err_msg=c)  # float32 of nm and px: about 1e-6 px apart


def test_content_decides_between_decode_and_picasso(tmp_path: Path) -> None:
    t = full_table(50)
    picasso_h5 = write(t, tmp_path / "p.h5", fmt="picasso")
    decode_hdf5 = write(t, tmp_path / "d.hdf5", fmt="decode")
    assert file_format(picasso_h5) == "picasso" and file_format(decode_hdf5) == "decode"
    for path in (picasso_h5, decode_hdf5):
        back = read_localizations(path)
        assert np.array_equal(back["x"], t["x"]) and np.array_equal(back["frame"], t["frame"])


@pytest.mark.parametrize("fmt", list(WRITTEN))
def test_large_tables_stream_in_bounded_chunks(tmp_path: Path, fmt: str) -> None:
    t = full_table(5000, seed=9)
    path = tmp_path / f"s{WRITTEN[fmt]}"
    with open_writer(path, pixel_size=PX, width=120, height=90, extras=tuple(c for c in OPTIONAL if c in t)) as w:
        for start in range(0, len(t), 700):  # appended block by block
            w.write(t.select(np.arange(start, min(start + 700, len(t)))))
    chunks = list(iter_localizations(path, pixel_size=PX, chunk_rows=1000))
    assert len(chunks) > 1 and max(len(c) for c in chunks) <= (2000 if fmt == "csv" else 1000)  # CSV: about
    whole = read_localizations(path, pixel_size=PX)
    streamed = EmitterTable.concat(chunks)
    for name in whole.names:
        assert np.array_equal(streamed[name], whole[name], equal_nan=True), name
    assert len(whole) == 5000


@pytest.mark.parametrize("target", list(WRITTEN))
def test_convert_file_carries_the_scale_frame_size_and_frames(tmp_path: Path, target: str) -> None:
    t = full_table(1500)
    src = write(t, tmp_path / "src_sml.mat")
    out = tmp_path / f"out{WRITTEN[target]}"
    assert convert_file(src, out, chunk_rows=400) == len(t)
    if target != "csv":
        assert localization_meta(out) == localization_meta(src)
    back = read_localizations(out, pixel_size=PX)
    np.testing.assert_allclose(back["x"], t["x"], atol=2e-4 if target in ("csv", "smlm") else 2e-5)
    assert np.array_equal(back["frame"], t["frame"])


# -- the real tables (Locan's test data; tests/data/tables/*/README.md), every row as the format's reader gives it
# (the jobs' reader, iter_localizations, may leave out rows outside the image) ------------------------------------

def test_real_smap_file_reads_with_its_camera_pixel_and_1_based_frames() -> None:
    t = read_smap(SMAP)
    assert len(t) == 4884 and file_format(SMAP) == "smap" and has_z(SMAP)
    # numberOfFrames (1000) is not taken as the frame count: the file's frames run to 1001
    assert localization_meta(SMAP) == localization_meta(SMAP).__class__(104.0, 256, 256, None)
    with h5py.File(SMAP) as f:
        loc = {k: f[f"saveloc/loc/{k}"][0] for k in ("frame", "xnm", "ynm", "xpix", "ypix", "znm", "xnmerr", "phot")}
    assert np.array_equal(t["frame"], loc["frame"].astype(np.int64) - 1) and t["frame"].min() == 0
    # SMAP's xnm = xpix * pixel with xpix MATLAB's 1-based pixel coordinate: decode_mem's x = xpix - 1
    np.testing.assert_allclose(t["x"], loc["xpix"] - 1, atol=1e-4)
    np.testing.assert_allclose(t["y"], loc["ypix"] - 1, atol=1e-4)
    assert np.array_equal(t["z"], loc["znm"].astype(np.float32))
    np.testing.assert_allclose(t["sigma_x"], loc["xnmerr"] / 104.0, rtol=1e-6)
    assert np.array_equal(t["photons"], loc["phot"].astype(np.float32))
    in_nm = read_smap(SMAP, 1.0)  # 1 nm pixels from the outer corner: xnm - 0.5 px
    np.testing.assert_allclose(in_nm["x"], loc["xnm"] - 52.0 - 0.5, atol=1e-3)


def test_a_smap_file_saved_as_matlab_v7_reads_as_its_v73_original(tmp_path: Path) -> None:
    from scipy.io import savemat

    with h5py.File(SMAP) as f:
        loc = {k: f[f"saveloc/loc/{k}"][0][:600].reshape(-1, 1) for k in f["saveloc/loc"]}
    info = {"cam_pixelsize_um": np.array([[0.104, 0.104]]), "Width": 256.0, "Height": 256.0,
            "roi": np.array([[0, 0, 256, 256]], float), "numberOfFrames": 1000.0}
    v7 = tmp_path / "cell_sml.mat"
    savemat(v7, {"saveloc": {"loc": loc, "file": {"info": info, "name": "cell.tif"}},
                 "fileformat": {"name": "sml"}}, do_compression=True)
    assert v7.read_bytes()[:19] == b"MATLAB 5.0 MAT-file"
    assert localization_meta(v7) == localization_meta(SMAP)
    got, want = read_smap(v7), read_smap(SMAP)
    for name in want.names:
        assert np.array_equal(got[name], want[name][:600]), name


def test_real_decode_file_swaps_decodes_x_and_y_as_smaps_decode_loader_does() -> None:
    t = read_decode(DECODE)
    assert len(t) == 96 and file_format(DECODE) == "decode"
    assert localization_meta(DECODE).pixel_size is None  # px_size (127, 117): not square, read in nm
    assert working_unit(DECODE) == 1.0
    with h5py.File(DECODE) as f:
        xyz, sig, frame = f["data/xyz"][()], f["data/xyz_sig"][()], f["data/frame_ix"][()]
    # SMAP's Loader_decode: ynm = x * px_size(1), xnm = y * px_size(2): DECODE's x is the row (decode_mem's y),
    # its nm from the first pixel's centre; decode_mem's nm from the outer corner, in 1 nm pixels (centres at .5)
    np.testing.assert_allclose(t["x"], xyz[:, 1] * 117.0 + 117.0 / 2 - 0.5, atol=2e-3)
    np.testing.assert_allclose(t["y"], xyz[:, 0] * 127.0 + 127.0 / 2 - 0.5, atol=2e-3)
    np.testing.assert_allclose(t["sigma_x"], sig[:, 1] * 117.0, rtol=1e-6)
    assert np.array_equal(t["sigma_z"], sig[:, 2]) and np.array_equal(t["frame"], frame)
    assert "prob" in t and "sigma_photons" in t


def test_real_smlm_file_reads_its_nm_and_0_based_frames() -> None:
    t = read_smlm(SMLM)
    assert len(t) == 10 and file_format(SMLM) == "smlm" and not has_z(SMLM)
    with zipfile.ZipFile(SMLM) as zf:
        manifest = json.loads(zf.read("manifest.json"))
    lo, hi = manifest["files"][0]["min"], manifest["files"][0]["max"]
    assert t["frame"].min() == t["frame"].max() == 0  # Locan wrote rapidSTORM's frames: from 0 (min 0)
    assert float(t["x"].min()) + 0.5 == pytest.approx(lo["position_x"], abs=0.01)
    assert float(t["y"].max()) + 0.5 == pytest.approx(hi["position_y"], abs=0.01)
    assert float(t["photons"].max()) == pytest.approx(hi["intensity"], rel=1e-6)
    assert float(t["bg"].min()) == pytest.approx(lo["local_background"], rel=1e-6)


@pytest.mark.parametrize(("path", "rows", "first"), [
    (RAPID, 14, (9657.4, 24533.5, 0, 33290.1, 767.733)),
    (REAL / "locan_images" / "rapidSTORM_from_images.txt", 12, (11135.1, 4757.58, 1, 2213.93, 530.336)),
])
def test_real_rapidstorm_tables_read_in_nm_with_0_based_frames(path: Path, rows: int, first: tuple) -> None:
    t = read_rapidstorm(path)
    assert len(t) == rows and file_format(path) == "rapidstorm" and localization_meta(path).pixel_size is None
    assert len(read_localizations(path)) == rows  # every row inside any image: the jobs read them all
    x, y, frame, amplitude, background = first
    assert (float(t["x"][0]) + 0.5, float(t["y"][0]) + 0.5) == (pytest.approx(x), pytest.approx(y))
    assert t["frame"][0] == frame and t["photons"][0] == pytest.approx(amplitude)
    assert t["bg"][0] == pytest.approx(background)


def test_real_thunderstorm_csv_with_its_header_quoted_as_one_field() -> None:
    t = read_localizations(THUNDER)
    assert len(t) == 19 and localization_meta(THUNDER).pixel_size is None
    assert int(t["frame"][0]) == 2000  # "2001.0": 1-based
    assert float(t["x"][0]) + 0.5 == pytest.approx(1320.109670647555, abs=1e-3)
    # ThunderSTORM's "uncertainty [nm]" is the lateral precision: σx = σy where no sigma_x/sigma_y columns
    assert float(t["sigma_x"][0]) == float(t["sigma_y"][0]) == pytest.approx(22.93255128689051, rel=1e-6)
    assert float(t["photons"][0]) == pytest.approx(296.55843680038157, rel=1e-6)


def test_thunderstorms_uncertainty_xy_and_z_columns(tmp_path: Path) -> None:
    path = tmp_path / "ts.csv"
    path.write_text('"id","frame","x [nm]","y [nm]","z [nm]","sigma1 [nm]","intensity [photon]","offset [photon]",'
                    '"uncertainty_xy [nm]","uncertainty_z [nm]"\n'
                    "1,1,150.0,250.0,-30.0,120.0,900.0,12.0,8.5,25.0\n2,3,350.0,50.0,40.0,130.0,700.0,11.0,9.5,30.0\n")
    t = read_localizations(path, pixel_size=100.0)
    assert list(t["frame"]) == [0, 2] and list(t["x"]) == [1.0, 3.0] and list(t["z"]) == [-30.0, 40.0]
    assert list(t["sigma_x"]) == list(t["sigma_y"]) == pytest.approx([0.085, 0.095])
    assert list(t["sigma_z"]) == [25.0, 30.0]


def test_decode_mems_csv_without_sigma_reads_back_without_sigma(tmp_path: Path) -> None:
    t = random_table(20)  # no σ: the CSV's uncertainty column is all NaN, and is not read as one
    write_localizations(t, tmp_path / "l.csv", pixel_size=100.0)
    assert "sigma_x" not in read_localizations(tmp_path / "l.csv", pixel_size=100.0)


# -- each file as its own tool reads it --------------------------------------------------------------------------

def test_smap_file_is_laid_out_as_matlab_writes_it(tmp_path: Path) -> None:
    path = write(full_table(100), tmp_path / "x_sml.mat")
    head = path.read_bytes()[:128]
    assert head.startswith(b"MATLAB 7.3 MAT-file") and head[124:128] == b"\x00\x02IM"  # as the real file's
    with h5py.File(path) as ours, h5py.File(SMAP) as real:
        assert ours.userblock_size == real.userblock_size == 512
        for name in ("saveloc", "saveloc/loc", "saveloc/file", "saveloc/file/info", "fileformat"):
            assert ours[name].attrs["MATLAB_class"] == b"struct"
            assert set(ours[name].attrs) <= set(real["saveloc"].attrs) | set(real[name].attrs) | {"H5PATH"}
        fields = [b"".join(f).decode() for f in ours["saveloc/loc"].attrs["MATLAB_fields"]]
        assert set(fields) == set(ours["saveloc/loc"])
        for field in ("frame", "xnm", "ynm", "znm", "phot", "bg", "locprecnm", "locprecznm", "xnmerr"):
            assert field in real["saveloc/loc"] and ours[f"saveloc/loc/{field}"].shape == (1, 100)
            assert ours[f"saveloc/loc/{field}"].attrs["MATLAB_class"] == b"double"
        for key in ("Width", "Height", "roi", "cam_pixelsize_um", "numberOfFrames"):
            assert ours[f"saveloc/file/info/{key}"].shape == real[f"saveloc/file/info/{key}"].shape
        name = ours["fileformat/name"]
        assert name.attrs["MATLAB_class"] == b"char" and name[()].ravel().tobytes().decode("utf-16-le") == "sml"
        # SMAP drops a localization whose locprecnm is NaN or above 250 nm when it loads a file
        assert np.all(np.isfinite(ours["saveloc/loc/locprecnm"][()]))


def test_decode_file_holds_what_decodes_loader_passes_to_emitterset(tmp_path: Path) -> None:
    path = write(full_table(100), tmp_path / "x.h5")
    with h5py.File(path) as ours, h5py.File(DECODE) as real:
        assert set(ours["data"]) == set(real["data"])  # EmitterSet(**data, **meta) takes exactly these
        assert set(ours["meta"].attrs) == set(real["meta"].attrs) and set(ours["decode"].attrs) == {"version"}
        assert list(ours)[:3] == ["data", "decode", "meta"]  # SMAP's loader takes DECODE's groups by position
        for key in ("xyz", "xyz_sig", "phot", "frame_ix", "id", "prob", "bg"):
            assert ours[f"data/{key}"].dtype == real[f"data/{key}"].dtype, key
        assert ours["data/xyz_cr"].shape is None and ours["meta"].attrs["xy_unit"] == "px"


def test_smlm_file_is_what_shareloc_reads(tmp_path: Path) -> None:
    path = write(full_table(100), tmp_path / "x.smlm")
    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        info = zf.getinfo("table-0.bin")
        assert info.compress_type == zipfile.ZIP_DEFLATED
    fmt = manifest["formats"][manifest["files"][0]["format"]]
    assert manifest["format_version"] == "0.2" and fmt["mode"] == "binary" and {"x", "y"} <= set(fmt["headers"])
    # ShareLoc.XYZ's viewer reads rows x columns x 4 bytes, every column a float32
    assert set(fmt["dtype"]) == {"float32"} and info.file_size == 100 * fmt["columns"] * 4
    assert fmt["units"][fmt["headers"].index("x")] == "nm"


# -- bad files -------------------------------------------------------------------------------------------------

def _bad_files(tmp_path: Path) -> list[Path]:
    """Files under each format's suffix that are not what the suffix says, or cut short."""
    from scipy.io import savemat

    t = full_table(3000)
    files = []
    for suffix in ("_sml.mat", ".h5", ".smlm"):
        whole = write(t, tmp_path / f"whole{suffix}")
        cut = tmp_path / f"cut{suffix}"
        cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
        files.append(cut)
    for suffix in (".mat", ".h5", ".hdf5", ".smlm", ".txt"):
        junk = tmp_path / f"junk{suffix}"
        junk.write_bytes(b"\x00\x01 not a table " * 50)
        files.append(junk)
    savemat(tmp_path / "other.mat", {"a": np.ones(3)})
    files.append(tmp_path / "other.mat")
    with h5py.File(tmp_path / "psf.h5", "w") as f:
        f["psf"] = np.ones((3, 3))
    files.append(tmp_path / "psf.h5")
    with zipfile.ZipFile(tmp_path / "nomanifest.smlm", "w") as zf:
        zf.writestr("table-0.bin", b"1234")
    files.append(tmp_path / "nomanifest.smlm")
    lying = tmp_path / "lying.smlm"  # a manifest that promises more rows than the table holds
    shutil.copy(write(t, tmp_path / "ok.smlm"), lying)
    with zipfile.ZipFile(lying) as zf:
        manifest, table = json.loads(zf.read("manifest.json")), zf.read("table-0.bin")
    manifest["files"][0]["rows"] += 5
    with zipfile.ZipFile(lying, "w") as zf:
        zf.writestr("manifest.json", json.dumps(manifest))
        zf.writestr("table-0.bin", table)
    files.append(lying)
    track = tmp_path / "track.txt"
    track.write_text(RAPID.read_text().replace("</localizations>", "<localizations></localizations></localizations>",
                                               1))
    files.append(track)
    files.append(tmp_path / "missing_sml.mat")
    return files


def test_bad_files_are_one_stack_error_naming_the_file(tmp_path: Path) -> None:
    for path in _bad_files(tmp_path):
        with pytest.raises(StackError) as err:
            read_localizations(path)
        assert path.name in str(err.value) and "\n" not in str(err.value), str(err.value)
