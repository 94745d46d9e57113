"""Lowering of ``popxl/ops/reduce.py``: reductions through ``popops.reduce`` (with a map
before or after where popops has no operation of that name), median and top-k through
``popops.sort`` / ``popops.top_k``, cumsum as a log-step scan of popops adds, histograms
through ``popops.histogram``."""

from __future__ import annotations

import math

import numpy as np

from tremula import poplar
from tremula.libs import popops
from tremula.libs.popops import expr as pe
from tremula.lowering.driver import Env, Lowerer, rule
from tremula.lowering.gather import const
from tremula.popxl.ops.base import OpNode

Operation = popops.Operation

#: op type -> (map before, reduction, map after)
REDUCE: dict[str, tuple[pe.Expr | None, Operation, pe.Expr | None]] = {
    "ReduceSum": (None, Operation.ADD, None),
    "ReduceMax": (None, Operation.MAX, None),
    "ReduceMin": (None, Operation.MIN, None),
    "ReduceProd": (None, Operation.MUL, None),
    "ReduceSumSquare": (None, Operation.SQUARE_ADD, None),
    "ReduceL1": (pe.Abs(pe._1), Operation.ADD, None),
    "ReduceL2": (None, Operation.SQUARE_ADD, pe.Sqrt(pe._1)),
    "ReduceLogSum": (None, Operation.ADD, pe.Log(pe._1)),
    "ReduceLogSumExp": (None, Operation.LOG_ADD, None),
}


def _moved(t: poplar.Tensor, axes: tuple[int, ...]) -> poplar.Tensor:
    """``t`` viewed as ``[kept elements, reduced elements]`` (kept axes in order)."""
    rest = [d for d in range(t.rank) if d not in axes]
    m = math.prod(t.shape[d] for d in rest)
    n = math.prod(t.shape[d] for d in axes)
    return t.dim_shuffle([*rest, *axes]).reshape((m, n))


@rule(*REDUCE)
def reduction(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    before, operation, after = REDUCE[op.type]
    t, out = env[op.inputs[0]], op.outputs[0]
    name = out.id
    if before is not None:
        t = popops.map(lw.graph, before, [t], prog, name=f"{name}/pre")
    r = popops.reduce(lw.graph, t, list(op.attrs["axes"]), operation, prog, name=name)
    if after is not None:
        popops.map_in_place(lw.graph, after, [r], prog, name=f"{name}/post")
    env[out] = r.reshape(out.shape)


@rule("ReduceMean")
def mean(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    t, out = env[op.inputs[0]], op.outputs[0]
    axes = list(op.attrs["axes"])
    n = math.prod(t.shape[a] for a in axes)
    if out.dtype.is_int:  # C division of the exact sum
        r = popops.reduce(lw.graph, t, axes, Operation.ADD, prog, name=out.id)
        popops.map_in_place(lw.graph, pe._1 / max(n, 1), [r], prog, name=f"{out.id}/div")
    else:
        shape = tuple(s for d, s in enumerate(t.shape) if d not in axes)
        r = lw.new_tensor(None, t.dtype, shape, out.id)
        popops.reduce_with_output(
            lw.graph, t, r, axes, Operation.ADD, prog, scale=1.0 / max(n, 1), name=out.id
        )
    env[out] = r.reshape(out.shape)


@rule("ReduceMedian")
def median(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    """The middle of each row sorted; its index: the middle of the row's positions sorted
    by its values (``popops.sort_key_value``, stable)."""
    t, out, index = env[op.inputs[0]], op.outputs[0], op.outputs[1]
    rows = _moved(t, op.attrs["axes"])
    mid = (rows.shape[1] - 1) // 2
    s = popops.sort(lw.graph, rows, 1, prog, name=out.id)
    r = lw.new_tensor(out)
    prog.add(poplar.Copy(s[:, mid].reshape(out.shape), r))
    env[out] = r
    positions = np.broadcast_to(np.arange(rows.shape[1], dtype=np.int32), rows.shape)
    iota = const(lw, poplar.INT, np.ascontiguousarray(positions), f"{index.id}/positions")
    order = popops.sort_key_value(lw.graph, rows, iota, 1, prog, name=index.id)
    i = lw.new_tensor(index)
    prog.add(poplar.Copy(order[:, mid].reshape(index.shape), i))
    env[index] = i


@rule("ArgMax", "ArgMin")
def arg(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    t, out = env[op.inputs[0]], op.outputs[0]
    rows = _moved(t, (op.attrs["dim"],))
    _, idx = popops.top_k(lw.graph, rows, 1, prog, largest=op.type == "ArgMax", name=out.id)
    env[out] = popops.cast(lw.graph, idx, poplar.INT, prog, name=f"{out.id}/cast").reshape(
        out.shape
    )


@rule("TopK")
def topk(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    t = env[op.inputs[0]]
    axis, last = op.attrs["axis"], t.rank - 1
    values, idx = popops.top_k(
        lw.graph,
        t.dim_roll(axis, last),
        op.attrs["k"],
        prog,
        largest=op.attrs["largest"],
        sorted=op.attrs["sorted"],
        name=op.outputs[0].id,
    )
    idx = popops.cast(lw.graph, idx, poplar.INT, prog, name=f"{op.outputs[1].id}/cast")
    env[op.outputs[0]] = values.dim_roll(last, axis)
    env[op.outputs[1]] = idx.dim_roll(last, axis)


@rule("CumSum")
def cumsum(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    """Hillis-Steele scan: ``ceil(log2 n)`` steps of ``y[k:] += y[:-k]``."""
    out = lw.new_tensor(op.outputs[0])
    prog.add(poplar.Copy(env[op.inputs[0]], out))
    v = out.dim_roll(op.attrs["dim"], 0)
    n, k = v.shape[0], 1
    while k < n:
        s = popops.add(lw.graph, v[k:], v[: n - k], prog, name=f"{op.outputs[0].id}/step{k}")
        prog.add(poplar.Copy(s, v[k:]))
        k *= 2
    env[op.outputs[0]] = out


@rule("Histogram")
def histogram(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    t, out = env[op.inputs[0]], op.outputs[0]
    levels = np.asarray(op.attrs["levels"], dtype=np.float64)
    if op.inputs[0].dtype.is_int:  # x >= l  <=>  x >= ceil(l) for integer x
        levels = np.ceil(levels)
    counts = popops.histogram(
        lw.graph, t, list(levels), prog, absolute_of_data=op.attrs["absolute_of_input"], name=out.id
    )
    env[out] = popops.cast(lw.graph, counts, poplar.UNSIGNED_INT, prog, name=f"{out.id}/cast")


@rule("LambSquare")
def lamb_square(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    t, out = env[op.inputs[0]], op.outputs[0]
    dims = list(range(t.rank))
    if t.dtype not in (poplar.FLOAT, poplar.HALF):  # integers: squared in float32
        t = popops.cast(lw.graph, t, poplar.FLOAT, prog, name=f"{out.id}/cast")
    r = popops.reduce(
        lw.graph, t, dims, Operation.SQUARE_ADD, prog, name=out.id, out_dtype=poplar.FLOAT
    )
    env[out] = r.reshape(())
