"""The optimizer a case declares: its fields, validated here, and one way to build it.

A case names a `torch.optim` optimizer and its settings as fields of the case (`CaseSpec`
inherits `OptimizerFields`). The optimizer is built by `graders.harness.build_optimizer` alone:
in the sandbox for the learner's run, and here, from the declaration, for every reference the
grader recomputes (`declared_optimizer`). Its state after a call is recorded as `STATE_FIELDS`
(`graders.harness.optimizer_state`), and loaded back into a fresh optimizer (`load_state`) to
judge one step from the learner's own state.
"""

from __future__ import annotations

from typing import Any, Literal, Self

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from graders.harness import Record, build_optimizer

OptimizerName = Literal["sgd", "adam", "adamw"]

# Which settings each optimizer takes; a setting given to one that does not take it is refused.
_SETTINGS: dict[str, frozenset[str]] = {
    "sgd": frozenset({"momentum", "dampening", "nesterov", "weight_decay"}),
    "adam": frozenset({"betas", "eps", "weight_decay", "amsgrad"}),
    "adamw": frozenset({"betas", "eps", "weight_decay", "amsgrad"}),
}
_DEFAULTS: dict[str, Any] = {
    "momentum": 0.0,
    "dampening": 0.0,
    "nesterov": False,
    "weight_decay": 0.0,
    "betas": None,
    "eps": None,
    "amsgrad": False,
}

# What the harness records of the optimizer's state for the weight, after each call: an SGD
# momentum buffer; Adam's running averages (and amsgrad's maximum) and its step count.
# Of the first parameter (the first layer's weight, `graders.harness.first_parameter`).
STATE_FIELDS = {
    "momentum": "first?",
    "exp_avg": "first?",
    "exp_avg_sq": "first?",
    "max_exp_avg_sq": "first?",
    "opt_step": "number",
}


class OptimizerFields(BaseModel):
    """A case's optimizer (docs/authoring.md, "The optimizer"). Unset settings are torch's
    defaults, except AdamW's weight decay, which is 0 unless declared."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    optimizer: OptimizerName = "sgd"
    lr: float = Field(default=0.1, gt=0)
    momentum: float = Field(default=0.0, ge=0, lt=1)
    dampening: float = Field(default=0.0, ge=0, lt=1)
    nesterov: bool = False
    weight_decay: float = Field(default=0.0, ge=0, lt=1)
    betas: tuple[float, float] | None = None
    eps: float | None = Field(default=None, gt=0, lt=1)
    amsgrad: bool = False

    @model_validator(mode="after")
    def _settings_apply(self) -> Self:
        given = {name for name, default in _DEFAULTS.items() if getattr(self, name) != default}
        foreign = sorted(given - _SETTINGS[self.optimizer])
        if foreign:
            raise ValueError(
                f"{', '.join(foreign)}: not a setting of optimizer {self.optimizer!r} "
                f"(it takes {', '.join(sorted(_SETTINGS[self.optimizer]))}): remove it"
            )
        if self.nesterov and (self.momentum == 0 or self.dampening != 0):
            raise ValueError("nesterov: needs a momentum above 0 and no dampening")
        if self.betas is not None and not all(0 <= beta < 1 for beta in self.betas):
            raise ValueError("betas: each must be at least 0 and below 1")
        return self

    def optimizer_settings(self) -> dict[str, Any]:
        """The fields `graders.harness.build_optimizer` reads."""
        return {"optimizer": self.optimizer, "lr": self.lr} | {
            name: getattr(self, name) for name in _SETTINGS[self.optimizer]
        }

    def describe_optimizer(self) -> str:
        """The declaration in words, for an author's messages: `adam, lr 0.01`."""
        settings = {name: getattr(self, name) for name in _SETTINGS[self.optimizer]}
        said = [f"{n} {v:g}" if isinstance(v, float) else f"{n} {v}" for n, v in settings.items()
                if v != _DEFAULTS[n]]  # fmt: skip
        return ", ".join([self.optimizer, f"lr {self.lr:g}", *said])

    @property
    def stateful(self) -> bool:
        """Does a step depend on more than the parameters and their gradients?"""
        return self.optimizer != "sgd" or self.momentum > 0


def declared_optimizer(
    declaration: OptimizerFields, parameters: list[torch.Tensor]
) -> torch.optim.Optimizer:
    """The optimizer a case declares, built here from the declaration, never from the harness."""
    return build_optimizer(parameters, declaration.optimizer_settings())


def load_state(optimizer: torch.optim.Optimizer, parameter: torch.Tensor, state: Record) -> None:
    """Give a fresh optimizer the recorded state of `parameter` (an empty state is a first step)."""
    if state.get("opt_step") in (None, 0.0) and state.get("momentum") is None:
        return
    loaded: dict[str, Any] = {}
    for name, key in (
        ("momentum", "momentum_buffer"),
        ("exp_avg", "exp_avg"),
        ("exp_avg_sq", "exp_avg_sq"),
        ("max_exp_avg_sq", "max_exp_avg_sq"),
    ):
        if state.get(name) is not None:
            loaded[key] = torch.tensor(state[name], dtype=torch.float32)
    if isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW):
        loaded["step"] = torch.tensor(float(state.get("opt_step") or 0.0))
    optimizer.state[parameter] = loaded
