"""Which shipped model runs where no ``--model`` is given: the wide one on a GPU; on a CPU the light one where it
passed issue 77's bars, else the small one.

The small generalist (``default_2d.pt``, 16 features) was sized for what a CPU can run; the wide one
(``default_2d_wide.pt``, DECODE's 48 features, ``pipelines/train_generalist_2d_wide.yaml``) is more accurate
where its speed is fine — a GPU — and several times slower per frame on a CPU (``benchmarks/bench_wide.py``
measures both on the machine it runs on). The light one (``default_2d_light.pt``, under a quarter of the small
one's arithmetic) is taken on a CPU only while ``LIGHT_VERDICT`` says that this very file (its SHA-256) passed:
within 0.02 Jaccard of the small model and ahead of tuned Picasso everywhere (``benchmarks/light_verdict.py``
writes it from the measured results). ``infer`` and ``fit`` record the choice and why in their JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

SHIPPED_MODEL = Path(__file__).resolve().parents[2] / "data" / "models" / "default_2d.pt"
"""The shipped default model: a generalist for common 2D setups (its card: ``default_2d.md`` beside it)."""
SHIPPED_WIDE_MODEL = SHIPPED_MODEL.with_name("default_2d_wide.pt")
"""The shipped wide generalist (same envelope as ``SHIPPED_MODEL``, 48 features), chosen on a GPU when present."""
SHIPPED_LIGHT_MODEL = SHIPPED_MODEL.with_name("default_2d_light.pt")
"""The shipped light generalist (same envelope, 8 features), chosen on a CPU where ``LIGHT_VERDICT`` passes it."""
LIGHT_VERDICT = SHIPPED_MODEL.with_name("default_2d_light_cpu.json")
"""Whether ``SHIPPED_LIGHT_MODEL`` is the CPU default, from the measured results (``benchmarks/light_verdict.py``)."""


@dataclass(frozen=True)
class ModelChoice:
    """The model a run uses and why (``given`` when the user named it)."""

    path: Path
    why: str
    given: bool = False

    def as_dict(self) -> dict[str, str | bool]:
        return {"path": str(self.path), "given": self.given, "why": self.why}


def choose_model(given: str | Path | None, device_type: str, *, small: Path = SHIPPED_MODEL,
                 wide: Path = SHIPPED_WIDE_MODEL, light: Path = SHIPPED_LIGHT_MODEL,
                 verdict: Path = LIGHT_VERDICT, light_refused: str | None = None) -> ModelChoice:
    """``given`` if there is one; else the wide shipped model on a GPU (``device_type`` 'cuda') where it is
    shipped; else the light one where ``verdict`` passes it (``light_verdict``), else the small one.
    ``small``/``wide``/``light``/``verdict``: the shipped files (tests point them elsewhere); ``light_refused``: why
    this job never takes the light one (the reason is said; ``fit``: fine-tuning is for accuracy)."""
    if given is not None:
        return ModelChoice(Path(given), "given (--model)", given=True)
    if device_type != "cuda":
        kind = device_type.upper()
        passed, why = (False, light_refused) if light_refused else light_verdict(light, verdict)
        if passed:
            return ModelChoice(light, f"a {kind}: the light shipped model ({why})")
        return ModelChoice(small, f"a {kind}: the small shipped model (the wide one is several times slower per "
                                  f"frame on a CPU; the light one is not taken: {why})")
    if wide.is_file():
        return ModelChoice(wide, "a GPU: the wide shipped model (more accurate; its speed is fine on a GPU)")
    return ModelChoice(small, f"a GPU, but the wide model is not shipped ({wide.name} missing): the small one")


def light_verdict(light: Path, verdict: Path) -> tuple[bool, str]:
    """(whether ``verdict`` passes ``light`` as the CPU default, why in a few words): it must name this file's
    SHA-256 (a retrained or replaced file is measured again) and say ``cpu_default``."""
    if not light.is_file():
        return False, f"{light.name} not shipped"
    try:
        said = json.loads(verdict.read_text())
    except (OSError, ValueError):
        return False, f"no verdict ({verdict.name} missing or unreadable)"
    from decode_mem.model.trained import file_sha256

    if not isinstance(said, dict) or said.get("sha256") != file_sha256(light):
        return False, f"{verdict.name} was written for another {light.name}"
    return bool(said.get("cpu_default")), str(said.get("summary", "measured"))
