"""Collective operators: one table row per operator (combine, pre-map, types, cost).

A ring reduction combines a received partial with the replica's own chunk:
``partial = combine(received, pre(own))``; the first partial is ``pre(own)``. MEAN adds
and scales by ``1 / group_size`` in its last step; SQUARE_ADD squares each replica's
values before adding; LOCAL does not reduce (each replica keeps its own values, the
gradient of an all-gather).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tremula import poplar
from tremula.libs.gcl.errors import CollectiveError


class CollectiveOperator(enum.Enum):
    """GCL's ``CollectiveOperator``."""

    ADD = "ADD"
    MEAN = "MEAN"
    MUL = "MUL"
    MIN = "MIN"
    MAX = "MAX"
    LOGICAL_AND = "LOGICAL_AND"
    LOGICAL_OR = "LOGICAL_OR"
    SQUARE_ADD = "SQUARE_ADD"
    LOCAL = "LOCAL"


# element kinds: "f" float, "i" integer (signed or unsigned), "b" bool
_NUMERIC = frozenset("fi")


def _square(x: np.ndarray) -> np.ndarray:
    return x * x


@dataclass(frozen=True)
class OpRule:
    """How an operator reduces: ``combine`` (None for LOCAL), the map applied to each
    replica's own values, the element kinds it accepts, and cycles per 64-bit vector of
    the combine (float/half; integer ops cost ``int_cycles`` per element)."""

    combine: Callable[..., np.ndarray] | None
    pre: Callable[[np.ndarray], np.ndarray] | None
    kinds: frozenset[str]
    cycles_per_vector: int
    int_cycles: int = 7
    mean: bool = False


# [proposal] cycles: popops BinaryOp2D shape (cyclesPerLoop + overhead per vector):
# ADD/MUL 1 + 2, MIN/MAX 1 + 5, SQUARE_ADD one more for the square, logical ops 2 + 5.
COLLECTIVE_RULES: dict[CollectiveOperator, OpRule] = {
    CollectiveOperator.ADD: OpRule(np.add, None, _NUMERIC, 3),
    CollectiveOperator.MEAN: OpRule(np.add, None, frozenset("f"), 3, mean=True),
    CollectiveOperator.MUL: OpRule(np.multiply, None, _NUMERIC, 3),
    CollectiveOperator.MIN: OpRule(np.minimum, None, _NUMERIC, 6),
    CollectiveOperator.MAX: OpRule(np.maximum, None, _NUMERIC, 6),
    CollectiveOperator.LOGICAL_AND: OpRule(np.logical_and, None, frozenset("b"), 7),
    CollectiveOperator.LOGICAL_OR: OpRule(np.logical_or, None, frozenset("b"), 7),
    CollectiveOperator.SQUARE_ADD: OpRule(np.add, _square, _NUMERIC, 4, int_cycles=9),
    CollectiveOperator.LOCAL: OpRule(None, None, frozenset("fib"), 0),
}

_KIND_NAMES = {"f": "floating-point", "i": "integer", "b": "bool"}


def element_kind(dtype: poplar.Type) -> str:
    """``"f"``, ``"i"`` or ``"b"`` for a Poplar type."""
    kind = dtype.numpy.kind
    return "i" if kind in "iu" else kind


def as_operator(op: CollectiveOperator | str) -> CollectiveOperator:
    """``op`` as a CollectiveOperator; strings are matched by name, case-insensitively
    (``"add"``, ``"square_add"``, ``"and"``, ``"or"``)."""
    if isinstance(op, CollectiveOperator):
        return op
    if isinstance(op, str):
        key = op.strip().upper()
        key = {"AND": "LOGICAL_AND", "OR": "LOGICAL_OR"}.get(key, key)
        if key in CollectiveOperator.__members__:
            return CollectiveOperator[key]
    names = ", ".join(CollectiveOperator.__members__)
    raise CollectiveError(f"collective operator {op!r} unknown; expected one of {names}")


def check_operator(op: CollectiveOperator, t: poplar.Tensor, where: str) -> OpRule:
    """The rule of ``op`` after checking that it applies to the type of ``t``."""
    rule = COLLECTIVE_RULES[op]
    kind = element_kind(t.dtype)
    if kind not in rule.kinds:
        allowed = " or ".join(_KIND_NAMES[k] for k in sorted(rule.kinds))
        raise CollectiveError(
            f"{where}({t!r}): operator {op.name} does not apply to {t.dtype} tensors; it "
            f"takes {allowed} types"
        )
    return rule
