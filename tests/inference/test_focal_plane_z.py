"""A model of a PSF that changes across the field reads z from the focal plane where each spot is
(``z_reference`` 'focal_plane'): its training targets are z less the PSF's focal shift at the emitter's place, and
inference adds that shift back, so localizations are absolute; a bare network of such a model is refused."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from decode_mem.errors import ConfigError
from decode_mem.infer import predict_stack
from decode_mem.io.table import EmitterTable
from decode_mem.model import DecodeNet, ModelConfig
from decode_mem.model.checkpoint import load_model, save_checkpoint
from decode_mem.simulate import SimulationConfig, simulate_movie
from decode_mem.simulate.dataset import simulate_samples
from decode_mem.simulate.field_spline import FieldSplinePSF

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "psf"))
from psf_helpers import grid_field_psf

FIELD = (64, 80)
SHIFT = 120.0  # nm, the beads' focal shifts run -SHIFT .. SHIFT


@pytest.fixture(scope="module")
def field_sim(tmp_path_factory) -> SimulationConfig:
    psf = tmp_path_factory.mktemp("focal") / "field.h5"
    grid_field_psf(psf, FIELD, np.arange(-700.0, 701.0, 50.0), 10, [0.0, 40.0, 79.0], [0.0, 30.0, 63.0], SHIFT,
                   (-400.0, 400.0), (-600.0, 600.0))
    return SimulationConfig.from_dict({"frame_size": [32, 32], "density": 1.0, "psf": "spline", "psf_file": str(psf),
                                       "z_range": [-400.0, 400.0], "bg": 40.0, "photons_mean": 4000.0,
                                       "photons_std": 500.0, "camera": "emccd", "margin": 4.0})


def test_training_targets_are_z_less_the_focal_shift_at_each_emitters_place(field_sim) -> None:
    absolute = simulate_samples(field_sim, 6, seed=3)
    focal = simulate_samples(replace(field_sim, z_reference="focal_plane"), 6, seed=3)
    assert torch.equal(absolute["frames"], focal["frames"]) and torch.equal(absolute["mask"], focal["mask"])
    em, mask, origin = absolute["em"], absolute["mask"], absolute["origin"]
    fx = em[..., 0] + origin[:, None, 1]  # the emitters' places in the field
    fy = em[..., 1] + origin[:, None, 0]
    shift = FieldSplinePSF(field_sim.field_psf().field).focal_shift(fx[mask], fy[mask])
    assert float(shift.abs().max()) > 30.0  # the windows lie where the focal plane differs
    torch.testing.assert_close(focal["em"][..., 2][mask], em[..., 2][mask] - shift, atol=1e-3, rtol=0)
    assert torch.equal(focal["em"][..., [0, 1, 3]], em[..., [0, 1, 3]])


def test_inference_adds_the_focal_shift_back_and_a_bare_network_is_refused(field_sim, tmp_path: Path) -> None:
    torch.manual_seed(0)
    cfg = ModelConfig.tiny(use_z=True, z_scale=900.0, field_shape=FIELD, p_bias_init=0.0)  # p ~ 0.5: detections
    net = DecodeNet(cfg).eval()
    whole = replace(field_sim, frame_size=FIELD)
    models = {}
    for ref in ("absolute", "focal_plane"):
        twin = DecodeNet(replace(cfg, z_reference=ref))
        twin.load_state_dict(net.state_dict())
        path = save_checkpoint(tmp_path / f"{ref}.pt", net=twin, camera=whole.camera,
                               simulation=replace(whole, z_reference=ref).to_dict(), step=0)
        models[ref] = load_model(path)
    adu, _, _ = simulate_movie(whole, 3, seed=5)
    tables = {ref: EmitterTable.concat(list(predict_stack(adu, m, chunk_size=32, batch_size=1, amp="off")))
              for ref, m in models.items()}
    a, f = tables["absolute"], tables["focal_plane"]
    assert len(a) > 20 and len(a) == len(f)
    for name in ("frame", "x", "y", "photons", "prob"):
        assert np.array_equal(a[name], f[name]), name
    field = FieldSplinePSF(models["focal_plane"].psf_field)
    shift = field.focal_shift(torch.as_tensor(a["x"]).float(), torch.as_tensor(a["y"]).float()).numpy()
    assert np.ptp(shift) > 50.0  # localizations over the field, where the focal plane differs
    np.testing.assert_allclose(f["z"] - a["z"], shift, atol=1e-2)  # the interpolation training used
    with pytest.raises(ConfigError, match="bare network"):
        next(iter(predict_stack(adu, models["focal_plane"].net, camera=whole.camera, chunk_size=32)))


def test_focal_plane_z_needs_a_psf_that_changes_across_the_field(field_sim) -> None:
    with pytest.raises(ConfigError, match="z_reference"):
        ModelConfig(use_z=True, z_reference="focal_plane")
    with pytest.raises(ConfigError, match="z_reference"):
        SimulationConfig.from_dict({"psf": "astig3d", "z_reference": "focal_plane"})
    with pytest.raises(ConfigError, match="z_reference"):
        SimulationConfig.from_dict({**field_sim.to_dict(), "z_reference": "objective"})


def test_fit_trains_a_field_model_on_z_from_the_focal_plane_with_room_for_the_shifts(field_sim) -> None:
    from decode_mem.fit.core import matched_3d, target_z_scale

    matched = matched_3d({"density_per_um2": 0.5, "photons_median": 3000.0, "background_photons": 40.0,
                          "psf_sigma_px": 1.3}, field_sim.camera, field_sim.psf_file)
    assert matched.z_reference == "focal_plane"
    # the targets reach the z range less the largest shift (widened as the interpolation clamps it: 1.5 x SHIFT)
    assert target_z_scale(matched) == pytest.approx(1.2 * (400.0 + 1.5 * SHIFT))
    assert target_z_scale(replace(matched, z_reference="absolute")) == pytest.approx(1.2 * 400.0)
