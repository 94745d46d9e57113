"""Lowering of ``scatter`` and ``scatter_reduce`` (``tremula/popxl/ops/scatter.py``): each
value's flat target in the output, then popops' multi-update (plain, add or a reduction)."""

from __future__ import annotations

import math

import numpy as np

from tremula import poplar
from tremula.libs import popops
from tremula.libs.popops import expr as pe
from tremula.lowering.driver import Env, Lowerer, rule
from tremula.lowering.gather import const, signed, wrapped
from tremula.popxl.ops.base import OpNode
from tremula.popxl.ops.scatter import start_value


@rule("Scatter")
def scatter(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    t_ir, idx_ir, _ = op.inputs
    t, idx, values = (env[i] for i in op.inputs)
    name = op.outputs[0].id
    flat = _flat_targets(lw, idx, idx_ir.shape, t_ir.shape, op.attrs["axis"], prog, name)
    out = lw.new_tensor(op.outputs[0])
    prog.add(poplar.Copy(t, out))
    n = values.num_elements
    popops.multi_update(
        lw.graph, out.reshape((out.num_elements, 1)), flat, values.reshape((n, 1)), prog,
        name=name,
    )  # fmt: skip
    env[op.outputs[0]] = out


def _flat_targets(
    lw: Lowerer,
    idx: poplar.Tensor,
    data_shape: tuple[int, ...],
    out_shape: tuple[int, ...],
    ax: int,
    prog: poplar.Sequence,
    name: str,
) -> poplar.Tensor:
    """The flat output element each element of ``data`` goes to (``idx`` has data's shape,
    its values on axis ``ax``; negatives count from the end), -1 for out-of-range indices
    (ignored by the multi-updates). Shared by scatter and scatter_reduce."""
    strides = np.array(
        [math.prod(out_shape[d + 1 :]) for d in range(len(out_shape))], dtype=np.int64
    )
    pos = np.indices(data_shape).reshape(len(data_shape), -1)
    pos[ax] = 0
    base = const(lw, poplar.INT, (strides @ pos).astype(np.int32).reshape(data_shape), name)
    i = wrapped(signed(idx, pe._2), out_shape[ax])
    valid = pe.And(pe.Gte(i, 0), pe.Lt(i, out_shape[ax]))
    e = pe.Select(pe._1 + i * int(strides[ax]), -1, valid)
    return popops.map(lw.graph, e, [base, idx], prog, name=f"{name}/indices").flatten()


@rule("ScatterReduce")
def scatter_reduce(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    data_ir = op.inputs[0]
    data, idx = env[data_ir], env[op.inputs[1]]
    a, name = op.attrs, op.outputs[0].id
    ax, red = a["axis"], a["reduction"]
    shape, out_shape = data_ir.shape, op.outputs[0].shape
    if a["broadcast"]:  # a 1-D index per position on the axis, the same across the others
        idx = idx.reshape(tuple(s if d == ax else 1 for d, s in enumerate(shape)))
        for d, s in enumerate(shape):
            if d != ax:
                idx = idx.broadcast(s, d)
    flat = _flat_targets(lw, idx, shape, out_shape, ax, prog, name)
    out = lw.new_tensor(op.outputs[0])
    table = out.reshape((out.num_elements, 1))
    rows = data.reshape((data.num_elements, 1))
    g = lw.graph
    initial = len(op.inputs) > 2
    if initial:
        prog.add(poplar.Copy(env[op.inputs[2]], out))
    elif red in ("sum", "none"):
        popops.zero(g, out, prog, name=f"{name}/zero")
    if red == "sum":
        popops.multi_update_add(g, table, flat, rows, 1.0, prog, name=name)
    elif red == "none":
        popops.multi_update(g, table, flat, rows, prog, name=name)
    else:
        if not initial:
            popops.fill(g, out, start_value(red, out.dtype.numpy), prog, name=f"{name}/start")
        popops.multi_update_op(g, table, flat, rows, red.upper(), prog, name=name)
        if not initial:  # positions no index reaches are 0
            hits = lw.new_tensor(None, poplar.FLOAT, out_shape, name=f"{name}/hits")
            popops.zero(g, hits, prog, name=f"{name}/hits")
            ones = const(lw, poplar.FLOAT, np.ones((data.num_elements, 1), np.float32), name)
            popops.multi_update_add(
                g, hits.reshape((hits.num_elements, 1)), flat, ones, 1.0, prog, name=f"{name}/hits"
            )
            popops.map_in_place(
                g, pe.Select(pe._1, 0, pe.Gt(pe._2, 0.0)), [out, hits], prog, name=f"{name}/empty"
            )
    env[op.outputs[0]] = out
