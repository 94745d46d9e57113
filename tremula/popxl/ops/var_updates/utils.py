"""What the variable updates share (PopXL's ``ops/var_updates/utils.py``): optimiser
hyper-parameters, the input checks (``ops/utils.py``'s, as PopXL runs them), and the op
attributes every update records.

A hyper-parameter is a Tensor (an op input), a number (a constant the op records: no tensor
is added to the graph, as PopART's ``OptimizerValue(f, isConst=True)``) or ``None``
(PopART's ``OptimizerValue()``: value 0, "not given").

Every update op records ``attrs["slots"]``, the input index of each role that is connected
(``{"t": 0, "X": 1, "f": 2}``), and ``attrs["values"]``, the number of each constant role.
Lowering rules and NumPy references read their operands by role through :func:`operand`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tremula.popxl.context import get_current_graph
from tremula.popxl.graph import Graph
from tremula.popxl.ops.base import create_op
from tremula.popxl.ops.utils import check_in_graph, check_tensor_ipu_and_tile_set
from tremula.popxl.tensor import Tensor

Hyper = Tensor | float | int | None


def checked_inputs(**tensors: Any) -> Graph:
    """The current graph, after ``check_in_graph`` and the IPU / tile-set check of the
    given tensors (``None`` values are skipped)."""
    graph = get_current_graph()
    given = {k: v for k, v in tensors.items() if v is not None}
    check_in_graph(graph, **given)
    check_tensor_ipu_and_tile_set(**given)
    return graph


def hyper_number(value: Any, what: str, role: str) -> float:
    """A constant hyper-parameter as a float (``TypeError`` naming it otherwise)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise TypeError(
            f"{what}: {role} must be a popxl.Tensor, a number or None, got "
            f"{type(value).__name__} {value!r}"
        )
    if isinstance(value, np.ndarray) and value.size != 1:
        raise TypeError(f"{what}: {role} must be a scalar, got an array of shape {value.shape}")
    return float(value)


class Operands:
    """Collects an update's inputs by role: the slots and constant values its op records."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.inputs: list[Tensor] = []
        self.slots: dict[str, int] = {}
        self.values: dict[str, float] = {}

    def tensor(self, role: str, t: Tensor) -> None:
        self.slots[role] = len(self.inputs)
        self.inputs.append(t)

    def hyper(self, role: str, value: Hyper, default: float = 0.0) -> None:
        """A Tensor becomes an input; a number a constant; ``None`` the constant
        ``default`` (PopART's unset ``OptimizerValue`` is 0)."""
        if isinstance(value, Tensor):
            self.tensor(role, value)
        else:
            self.values[role] = default if value is None else hyper_number(value, self.what, role)

    def attrs(self, **extra: Any) -> dict[str, Any]:
        return {"slots": dict(self.slots), "values": dict(self.values), **extra}


def create_update(
    op_type: str,
    operands: Operands,
    name: str,
    modified: Sequence[str] = ("t",),
    **attrs: Any,
) -> Tensor:
    """Add an update op; ``modified`` names the roles it writes in place (its output is an
    alias of the first one, named ``name``)."""
    (out,) = create_op(op_type, operands.inputs, operands.attrs(**attrs), [name])
    op = out.producer
    assert op is not None
    op.modified = tuple(sorted(operands.slots[r] for r in modified if r in operands.slots))
    return out


def operand(attrs: dict[str, Any], values: Sequence[Any], role: str) -> Any:
    """The operand of ``role`` of an update op with ``attrs``: ``values[slot]`` if
    connected, else its constant (None when it is neither)."""
    slot = attrs["slots"].get(role)
    if slot is not None:
        return values[slot]
    return attrs["values"].get(role)
