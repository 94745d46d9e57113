"""Lowering of ``popxl/ops/tensor_ops.py``: matmul through poplin, views and copies, init
and cast."""

from __future__ import annotations

import numpy as np

from tremula import poplar
from tremula.libs import poplin, popops
from tremula.lowering.driver import Env, Lowerer, rule
from tremula.popxl.ops.base import OpNode


def _copy_of(lw: Lowerer, op: OpNode, env: Env, view: poplar.Tensor, prog: poplar.Sequence) -> None:
    out = lw.new_tensor(op.outputs[0])
    prog.add(poplar.Copy(view, out))
    env[op.outputs[0]] = out


def _view(op: OpNode, t: poplar.Tensor) -> poplar.Tensor:
    base = op.definition.outplace
    if base == "Reshape":
        return t.reshape(op.attrs["shape"])
    if base == "Transpose":
        return t.dim_shuffle(op.attrs["permutation"])
    return t[op.attrs["key"]]


def copy_unobservable(op: OpNode, k: int = 0) -> bool:
    """True when output ``k`` of an out-of-place view op may alias its input: the result is
    not a graph output, nothing writes it (or a view of it) in place, and every use of it
    comes before anything writes the input (or a view of the input) in place."""
    graph = op.graph
    ops = graph.ops
    here = ops.index(op)
    out, src = op.outputs[k], op.inputs[0]
    if out in graph.outputs:
        return False
    src_views, out_views = {src}, {out}
    last_use, first_write = here, len(ops)
    for i, later in enumerate(ops[here + 1 :], start=here + 1):
        ins = later.inputs
        if later.definition.view:  # views of views stay tied to their base
            if src_views & set(ins):
                src_views.add(later.outputs[0])
            if out_views & set(ins):
                out_views.add(later.outputs[0])
        written = {ins[k] for k in later.modified}
        if written & out_views:
            return False
        if written & src_views:
            first_write = min(first_write, i)
        if out_views & set(ins):
            last_use = i
    return last_use < first_write


@rule("Reshape", "Transpose", "Slice", "Subsample")
def view_copy(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    view = _view(op, env[op.inputs[0]])
    if copy_unobservable(op):
        env[op.outputs[0]] = view  # no copy: no one can tell the difference
        return
    _copy_of(lw, op, env, view, prog)


@rule("ReshapeInplace", "TransposeInplace", "SliceInplace")
def view_alias(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    env[op.outputs[0]] = _view(op, env[op.inputs[0]])  # aliases the input: writes reach it


@rule("DetachInplace")
def detach_alias(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    env[op.outputs[0]] = env[op.inputs[0]]  # the input itself: writes to it reach it


@rule("Identity", "Detach")
def identity(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    _copy_of(lw, op, env, env[op.inputs[0]], prog)


@rule("Init")
def init(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    t = lw.new_tensor(op.outputs[0])
    if op.attrs["init_type"] == "zero":
        popops.zero(lw.graph, t, prog)
    else:
        prog.add(poplar.WriteUndef(t))
    env[op.outputs[0]] = t


@rule("Cast")
def cast(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    env[op.outputs[0]] = popops.cast(
        lw.graph, env[op.inputs[0]], op.attrs["dtype"].as_poplar(), prog
    )


#: PopXL's partials types as PopLin's ``partialsType`` option names them
_PARTIALS = {"float32": "float", "float16": "half"}


def matmul_options(op: OpNode) -> dict[str, object]:
    """PopLin's options of a matmul op: ``availableMemoryProportion`` and ``partialsType``
    (``popxl.float32`` is ``"float"``, ``popxl.float16`` ``"half"``) where the op sets them."""
    options: dict[str, object] = {}
    if op.attrs.get("available_memory_proportion") is not None:
        options["availableMemoryProportion"] = op.attrs["available_memory_proportion"]
    if op.attrs.get("partials_type") is not None:
        options["partialsType"] = _PARTIALS[op.attrs["partials_type"].name]
    return options


@rule("MatMul")
def matmul(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    a_ir, b_ir = op.inputs
    a, b = env[a_ir], env[b_ir]
    a2 = a.expand([0]) if a.rank == 1 else a
    b2 = b.expand([1]) if b.rank == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    m, k, n = a2.shape[-2], a2.shape[-1], b2.shape[-1]
    g = int(np.prod(batch))
    ga = a2.broadcast_to((*batch, m, k)).reshape((g, m, k)) if batch else a2.expand([0])
    gb = b2.broadcast_to((*batch, k, n)).reshape((g, k, n)) if batch else b2.expand([0])
    out_type = op.outputs[0].dtype.as_poplar()
    options = matmul_options(op)
    if g == 1:
        c = poplin.matmul(
            lw.graph, ga[0], gb[0], prog, out_type, name=op.outputs[0].id, options=options
        )
    else:
        c = poplin.matmul_grouped(
            lw.graph, ga, gb, prog, out_type, name=op.outputs[0].id, options=options
        )
    env[op.outputs[0]] = c.reshape(op.outputs[0].shape)
