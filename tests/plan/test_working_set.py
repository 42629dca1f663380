"""The network's host working set measured on this machine against its trace: measured when a unit is timed,
remembered, and used by the plans made after it (``footprint.working_set``)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from decode_mem.footprint import choose as choose_module
from decode_mem.footprint import plan_inference, working_set
from decode_mem.footprint.inference import ALLOCATOR_SLACK
from decode_mem.footprint.request import SizeRequest, Workload
from decode_mem.memory.peaks import reset_vm_hwm
from decode_mem.model import DecodeNet, ModelConfig

CPU = torch.device("cpu")


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DECODE_MEM_CACHE", str(tmp_path / "throughput.json"))
    return tmp_path


@pytest.fixture(scope="module")
def net() -> DecodeNet:
    torch.manual_seed(0)
    return DecodeNet(ModelConfig.small(use_z=False)).eval()


def test_a_measured_ratio_scales_the_network_term_and_never_lowers_it(net, cache) -> None:
    plan = plan_inference(net, (256, 256), chunk_size=256, batch_size=1, n_frames=8)
    assert plan.measured_ratio is None  # nothing measured here yet
    traced = plan.network_bytes
    larger = dataclasses.replace(plan, measured_ratio=1.5)
    assert larger.network_host_bytes == int(1.5 * traced) + ALLOCATOR_SLACK
    assert larger.host_bytes - plan.host_bytes == larger.network_host_bytes - plan.network_host_bytes > 0
    smaller = dataclasses.replace(plan, measured_ratio=0.5)  # below the default: the default stays
    assert smaller.network_host_bytes == plan.network_host_bytes


@pytest.mark.skipif(not reset_vm_hwm(), reason="VmHWM cannot be reset here: nothing is measured")
def test_timing_a_unit_measures_and_remembers_the_ratio_and_later_plans_use_it(net, cache) -> None:
    from decode_mem.footprint.speed import time_unit

    plan = plan_inference(net, (256, 256), chunk_size=256, batch_size=2, n_frames=8)
    time_unit(net, plan, CPU)
    ratio = working_set.remembered_ratio(CPU, plan.amp)
    assert ratio is not None and 0.2 < ratio < 10  # a real unit: its RssAnon rose by a sizeable share of its trace
    again = plan_inference(net, (256, 256), chunk_size=128, batch_size=1, n_frames=8)
    assert again.measured_ratio == ratio
    assert (cache / "working_set.json").exists()


@pytest.mark.skipif(not reset_vm_hwm(), reason="VmHWM cannot be reset here: nothing is measured")
def test_only_a_larger_ratio_replaces_the_remembered_one(cache) -> None:
    import numpy as np

    held = []
    big = working_set.measure_ratio(lambda: held.append(np.ones(64 << 18)), 16 << 20, CPU, "off")  # 128 MiB touched
    assert big > 4  # 128 MiB over 16 MiB traced
    small = working_set.measure_ratio(lambda: None, 16 << 20, CPU, "off")
    assert small is None or small < big  # None: the peak did not rise (nothing measured)
    assert working_set.remembered_ratio(CPU, "off") == pytest.approx(big, rel=1e-3)


def test_choose_plans_again_with_a_ratio_its_timing_measured(net, cache, monkeypatch) -> None:
    """A first run on a machine: the candidates were planned with the trace alone, the timed unit measured 3x;
    the choice it returns is planned with 3x."""
    def time_unit(net, plan, device):
        working_set.remember(working_set.working_set_path(), {working_set.ratio_key(device, plan.amp): 3.0})
        return 0.1

    monkeypatch.setattr(choose_module, "time_unit", time_unit)
    work = Workload((256, 256), CPU, 16, 2, 32)
    choice = choose_module.choose(net, work, SizeRequest(amp="off"), baseline_bytes=200 << 20)
    assert choice.plan.measured_ratio == 3.0
    plain = plan_inference(net, (256, 256), chunk_size=choice.plan.chunk_size, batch_size=choice.plan.batch_size,
                           block=choice.plan.block, baseline_bytes=200 << 20, n_frames=32)
    assert plain.measured_ratio == 3.0  # remembered: the same plan as the CLI would print
    assert choice.plan.blocks_host_bytes == plain.blocks_host_bytes
    assert choice.plan.blocks_host_bytes > dataclasses.replace(plain, measured_ratio=None).blocks_host_bytes
    assert choice.plan.probe_bytes >= choice.plan.network_host_bytes  # the timed units, planned with 3x too


def test_the_units_a_run_times_count_in_its_peak_but_not_against_its_budget(net, cache, monkeypatch) -> None:
    """A run that times candidates in its own process peaks there too: the largest candidate timed sets the plan's
    ``probe_bytes``, counted in ``host_bytes`` (the run's predicted peak); the budget is compared with the blocks'
    peak (``need_bytes``), which every candidate timed fitted; a run that times nothing has none."""
    timed = []

    def time_unit(net, plan, device):
        timed.append(plan)
        return 0.1 * plan.batch_size  # every batch equally fast per frame: the least memory wins

    monkeypatch.setattr(choose_module, "time_unit", time_unit)
    work = Workload((256, 256), CPU, 16, 2, 32)
    choice = choose_module.choose(net, work, SizeRequest(amp="off"), baseline_bytes=200 << 20)
    assert len(timed) > 1
    largest = max(p.network_host_bytes for p in timed)
    plan = choice.plan
    assert plan.probe_bytes == largest > plan.network_host_bytes  # a larger candidate than the one chosen was timed
    assert plan.host_bytes == max(plan.blocks_host_bytes, plan.baseline_bytes + largest)
    assert plan.need_bytes == plan.blocks_host_bytes
    monkeypatch.setattr(choose_module, "remembered_seconds", lambda net, plan, device: 0.1 * plan.batch_size)
    again = choose_module.choose(net, work, SizeRequest(amp="off"), baseline_bytes=200 << 20)
    assert again.plan.probe_bytes == 0 and again.plan.host_bytes == again.plan.blocks_host_bytes


def test_a_runtime_engines_plan_with_a_ratio_remembered_is_chosen_once(net, cache, monkeypatch) -> None:
    """A runtime's plans do not take torch's measured ratio (their working set is ``RUNTIME_WORKING_SET``): with a
    ratio remembered, choosing for 'openvino' (what 'auto' does after picking it) once recursed until Python's
    limit, so a first run of infer on a machine failed as soon as its engine was a runtime."""
    working_set.remember(working_set.working_set_path(), {working_set.ratio_key(CPU, "off"): 1.5})
    monkeypatch.setattr(choose_module, "time_unit", lambda net, plan, device: 0.1)
    work = Workload((256, 256), CPU, 16, 2, 32)
    choice = choose_module.choose(net, work, SizeRequest(amp="off", engine="openvino"), baseline_bytes=200 << 20)
    assert choice.plan.engine == "openvino" and choice.plan.measured_ratio is None
    torch_choice = choose_module.choose(net, work, SizeRequest(amp="off"), baseline_bytes=200 << 20)
    assert torch_choice.plan.measured_ratio == 1.5


def test_given_sizes_measure_the_ratio_once_where_none_is_remembered(net, cache, monkeypatch) -> None:
    """The user's sizes are not timed, so a fresh machine once planned them with the trace alone (1.25-1.31x under
    their peaks in field_psf.md at 8685dd2): with nothing remembered one unit of them measures the working set, the
    plan uses it and counts that unit in its peak; with a ratio remembered nothing is run."""
    measured = []

    def measure_working_set(net, plan, device):
        measured.append(plan)
        working_set.remember(working_set.working_set_path(), {working_set.ratio_key(device, plan.amp): 3.0})
        return 3.0

    monkeypatch.setattr(choose_module, "measure_working_set", measure_working_set)
    work = Workload((256, 256), CPU, 16, 2, 32)
    sizes = SizeRequest(chunk_size=128, batch_size=2, amp="off")
    choice = choose_module.choose(net, work, sizes, baseline_bytes=200 << 20)
    assert len(measured) == 1 and (measured[0].chunk_size, measured[0].batch_size) == (128, 2)
    assert choice.reason == "as given" and choice.plan.measured_ratio == 3.0
    assert choice.plan.probe_bytes == choice.plan.network_host_bytes  # the unit measured here peaked in this process
    again = choose_module.choose(net, work, sizes, baseline_bytes=200 << 20)
    assert len(measured) == 1 and again.plan.measured_ratio == 3.0  # remembered: not measured again
    assert choose_module.choose(net, work, dataclasses.replace(sizes, engine="openvino")).plan.measured_ratio is None
    assert len(measured) == 1  # a runtime's working set is not torch's: nothing to measure for it


@pytest.mark.skipif(not reset_vm_hwm(), reason="VmHWM cannot be reset here: nothing is measured")
def test_given_sizes_on_a_fresh_machine_plan_with_a_measured_ratio(net, cache) -> None:
    work = Workload((256, 256), CPU, 16, 2, 32)
    choice = choose_module.choose(net, work, SizeRequest(chunk_size=256, batch_size=2, amp="off"))
    ratio = working_set.remembered_ratio(CPU, "off")
    assert ratio is not None and choice.plan.measured_ratio == ratio
