"""Fine-tuning part of a network (``TrainConfig.trainable``): parameter-name patterns pick what trains.

A pattern is an ``fnmatch`` glob over ``net.named_parameters()`` names, optionally followed by output rows
(the first axis of the tensor: a conv's output channels): ``heads.sigma.2.weight[0]``, ``heads.*.bias[1:3]``.
Parameters no pattern matches are frozen (``requires_grad=False``, not given to the optimizer). A parameter
matched only with rows trains only those rows: a gradient hook zeroes the other rows' gradients, and its
optimizer group has no weight decay (AdamW's decay multiplies the whole tensor), so with a zero gradient
Adam's moments and the update of those rows stay exactly zero and the rows keep their values bit for bit.
Why: recalibrating one output channel of a trained model (its photon sigma) without changing the others.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from decode_mem.errors import ConfigError

_PATTERN = re.compile(r"^(?P<glob>[^\[\]\s]+)(?:\[(?P<start>\d+)(?::(?P<stop>\d+))?\])?$")


@dataclass(frozen=True)
class Selector:
    """One pattern: a glob over parameter names and, optionally, the rows ``[start, stop)`` that train."""

    glob: str
    rows: tuple[int, int] | None = None

    def matches(self, name: str) -> bool:
        return fnmatch.fnmatchcase(name, self.glob)


def parse_trainable(patterns: Sequence[str]) -> tuple[Selector, ...]:
    """Patterns -> selectors; a malformed pattern is a ConfigError naming it (checked with the config)."""
    if isinstance(patterns, str) or not patterns:
        raise ConfigError(f"train.trainable must be a non-empty list of parameter-name patterns or null, "
                          f"got {patterns!r}")
    out = []
    for pattern in patterns:
        m = _PATTERN.match(pattern) if isinstance(pattern, str) else None
        if m is None:
            raise ConfigError(f"train.trainable: {pattern!r} is not a parameter-name pattern (a glob such as "
                              f"'heads.sigma.*', optionally with rows: 'heads.sigma.2.weight[0]' or '[0:2]')")
        rows = None
        if m["start"] is not None:
            start = int(m["start"])
            stop = int(m["stop"]) if m["stop"] is not None else start + 1
            if stop <= start:
                raise ConfigError(f"train.trainable: {pattern!r} selects no rows")
            rows = (start, stop)
        out.append(Selector(m["glob"], rows))
    return tuple(out)


def select_trainable(net: nn.Module, patterns: Sequence[str] | None, weight_decay: float) -> list[dict[str, Any]]:
    """Freeze what ``patterns`` leave out and return the optimizer's parameter groups.

    None: every parameter trains (one group). Otherwise a pattern that matches no parameter, or rows beyond a
    parameter's first axis, is a ConfigError naming it, raised before anything is changed.
    """
    params = dict(net.named_parameters())
    if patterns is None:
        return [{"params": list(params.values()), "weight_decay": weight_decay}]
    selectors = parse_trainable(patterns)
    rows: dict[str, torch.Tensor | None] = {}  # name -> row mask (None: every row)
    for sel in selectors:
        names = [n for n in params if sel.matches(n)]
        if not names:
            raise ConfigError(f"train.trainable: {sel.glob!r} matches no parameter of the model "
                              f"(names look like {next(iter(params))!r})")
        for name in names:
            p = params[name]
            if sel.rows is None:
                rows[name] = None
                continue
            if p.ndim == 0 or sel.rows[1] > p.shape[0]:
                raise ConfigError(f"train.trainable: rows {sel.rows[0]}:{sel.rows[1]} of {name!r}, which has "
                                  f"{p.shape[0] if p.ndim else 0} rows")
            if name in rows and rows[name] is None:
                continue  # already trains whole
            mask = rows.get(name)
            mask = torch.zeros(p.shape[0], dtype=torch.bool) if mask is None else mask
            mask[sel.rows[0]:sel.rows[1]] = True
            rows[name] = mask
    whole, partial = [], []
    for name, p in params.items():
        if name not in rows:
            p.requires_grad_(False)
        elif rows[name] is None:
            whole.append(p)
        else:
            shape = (-1,) + (1,) * (p.ndim - 1)
            keep = rows[name].to(p.device).view(shape)
            p.register_hook(lambda grad, keep=keep: torch.where(keep, grad, torch.zeros((), dtype=grad.dtype,
                                                                                       device=grad.device)))
            partial.append(p)
    groups = [{"params": whole, "weight_decay": weight_decay}] if whole else []
    return groups + ([{"params": partial, "weight_decay": 0.0}] if partial else [])
