"""Which shipped model runs where no ``--model`` is given: the wide one on a GPU, the small one on a CPU.

The small generalist (``default_2d.pt``, 16 features) was sized for what a CPU can run; the wide one
(``default_2d_wide.pt``, DECODE's 48 features, ``pipelines/train_generalist_2d_wide.yaml``) is more accurate
where its speed is fine — a GPU — and several times slower per frame on a CPU (``benchmarks/bench_wide.py``
measures both on the machine it runs on). ``infer`` and ``fit`` record the choice and why in their JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SHIPPED_MODEL = Path(__file__).resolve().parents[2] / "data" / "models" / "default_2d.pt"
"""The shipped default model: a generalist for common 2D setups (its card: ``default_2d.md`` beside it)."""
SHIPPED_WIDE_MODEL = SHIPPED_MODEL.with_name("default_2d_wide.pt")
"""The shipped wide generalist (same envelope as ``SHIPPED_MODEL``, 48 features), chosen on a GPU when present."""


@dataclass(frozen=True)
class ModelChoice:
    """The model a run uses and why (``given`` when the user named it)."""

    path: Path
    why: str
    given: bool = False

    def as_dict(self) -> dict[str, str | bool]:
        return {"path": str(self.path), "given": self.given, "why": self.why}


def choose_model(given: str | Path | None, device_type: str, *, small: Path = SHIPPED_MODEL,
                 wide: Path = SHIPPED_WIDE_MODEL) -> ModelChoice:
    """``given`` if there is one; else the wide shipped model on a GPU (``device_type`` 'cuda') where it is
    shipped, else the small one. ``small``/``wide``: the shipped files (tests point them elsewhere)."""
    if given is not None:
        return ModelChoice(Path(given), "given (--model)", given=True)
    if device_type != "cuda":
        return ModelChoice(small, f"a {device_type.upper()}: the small shipped model (the wide one is several times "
                                  "slower per frame on a CPU)")
    if wide.is_file():
        return ModelChoice(wide, "a GPU: the wide shipped model (more accurate; its speed is fine on a GPU)")
    return ModelChoice(small, f"a GPU, but the wide model is not shipped ({wide.name} missing): the small one")
