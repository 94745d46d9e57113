"""``MultiExchange``: host and remote exchanges merged into one op (PopART's
``MultiExchangeOp``), as ``popxl.transforms.merge_exchange`` makes it.

Each merged exchange becomes an :class:`ExchangeDescriptor` of the op (its type, attributes
and how many inputs and outputs it had); the op's inputs and outputs are those of the merged
ops, in their order. The lowering lowers each part as the op it replaces.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tremula.popxl.ops.base import OPS, OpNode, _next_op_id, defop
from tremula.popxl.tensor import TensorSpec

#: the op types that move data between the device and host or remote memory
EXCHANGE_OPS = frozenset(
    {"HostLoad", "HostStore", "RemoteLoad", "RemoteLoadInplace", "RemoteStore"}
)


@dataclass(frozen=True)
class ExchangeDescriptor:
    """One exchange of a ``MultiExchange`` op: what the merged op was."""

    type: str
    attrs: dict[str, Any]
    num_inputs: int
    num_outputs: int
    modifies: tuple[int, ...]  # its inputs written in place (indices among its own)
    debug_name: str
    created_at: str


def _infer(specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
    out: list[TensorSpec] = []
    start = 0
    for d in attrs["descriptors"]:
        out += OPS[d.type].infer(specs[start : start + d.num_inputs], d.attrs)
        start += d.num_inputs
    return out


defop("MultiExchange", _infer, differentiable=False)


def descriptors_of(op: OpNode) -> tuple[ExchangeDescriptor, ...]:
    """The exchanges of an exchange op: its descriptors, or the op itself as one."""
    if op.type == "MultiExchange":
        return tuple(op.attrs["descriptors"])
    modifies = OPS[op.type].modifies
    return (
        ExchangeDescriptor(
            op.type, op.attrs, len(op.inputs), len(op.outputs), modifies, op.debug_name,
            op.created_at,
        ),
    )  # fmt: skip


def exchange_parts(op: OpNode) -> list[OpNode]:
    """The exchanges of ``op`` as op records (not in any graph), each with its own inputs
    and outputs: the parts of a ``MultiExchange``, else ``[op]``."""
    if op.type != "MultiExchange":
        return [op]
    parts, i, o = [], 0, 0
    for d in op.attrs["descriptors"]:
        part = OpNode(
            op.id, d.type, op.graph, op.inputs[i : i + d.num_inputs],
            op.outputs[o : o + d.num_outputs], d.attrs, d.modifies, op.ipu, op.tile_set,
            op.execution_context, d.debug_name, d.created_at,
        )  # fmt: skip
        parts.append(part)
        i, o = i + d.num_inputs, o + d.num_outputs
    return parts


def merged_exchange(ops: Sequence[OpNode]) -> OpNode:
    """A ``MultiExchange`` op (not yet in its graph) doing the exchanges of ``ops`` (exchange
    ops or ``MultiExchange`` ops of one graph, in order); their outputs become its outputs."""
    from tremula.popxl._ir.op.classes import op_class

    first = ops[0]
    descriptors = tuple(d for op in ops for d in descriptors_of(op))
    inputs = tuple(t for op in ops for t in op.inputs)
    outputs = tuple(t for op in ops for t in op.outputs)
    modified, aliases, i, o = [], [], 0, 0
    for d in descriptors:
        modified += [i + k for k in d.modifies]
        if d.modifies and d.num_outputs:
            aliases.append((i + d.modifies[0], o))  # an in-place load's output is its input
        i, o = i + d.num_inputs, o + d.num_outputs
    scope = first.debug_name.rpartition("/")[0]
    attrs = {"descriptors": descriptors, "aliases": tuple(aliases)}
    multi = op_class("MultiExchange")(
        _next_op_id[0], "MultiExchange", first.graph, inputs, outputs, attrs, tuple(modified),
        first.ipu, first.tile_set, first.execution_context,
        f"{scope}/MultiExchange" if scope else "MultiExchange", first.created_at,
    )  # fmt: skip
    _next_op_id[0] += 1
    for t in outputs:
        t._producer = multi
    return multi
