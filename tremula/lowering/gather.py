"""Lowering of ``popxl/ops/gather.py``: gather through ``popops.multi_slice`` on the
indexed axis moved first; a grouped gather through one multi_slice of a table of every
group's rows, and its gradient a ``multi_update_add`` into that table; scatter as
``popops.multi_update`` of flat element indices computed on the device; dynamic slices
through ``popops.dynamic_slice`` / ``dynamic_update``; onehot as one popops map against a
constant ``arange``."""

from __future__ import annotations

import math

import numpy as np

from tremula import poplar
from tremula.libs import popops
from tremula.libs.popops import expr as pe
from tremula.lowering.driver import Env, Lowerer, rule
from tremula.popxl.ops.base import OpNode
from tremula.popxl.ops.gather import grouped_layout, grouped_out_perm


def const(lw: Lowerer, dtype: poplar.Type, data: np.ndarray, name: str) -> poplar.Tensor:
    """A constant of ``data``, mapped linearly over the tiles."""
    c = lw.graph.add_constant(dtype, data.shape, data, lw.name(name))
    poplar.map_tensor_linearly(lw.graph, c, grain_size=lw.graph.target.vector_width(dtype.size))
    return c


def signed(index: poplar.Tensor, e: pe.Expr) -> pe.Expr:
    """The index expression ``e`` of ``index`` as a signed int (uint32 indices are cast)."""
    return pe.Cast(e, poplar.INT) if index.dtype is not poplar.INT else e


def wrapped(i: pe.Expr, n: int) -> pe.Expr:
    """A signed index with negative values counted from the end."""
    return pe.Select(i + n, i, pe.Lt(i, 0))


@rule("Gather", "TiedGather")
def gather(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    t, idx = env[op.inputs[0]], env[op.inputs[1]]
    ax, k = op.attrs["axis"], idx.rank
    table = t.dim_roll(ax, 0)
    rest = table.shape[1:]
    rows = table.reshape((table.shape[0], math.prod(rest)))
    g = popops.multi_slice(lw.graph, rows, idx.flatten(), prog, name=op.outputs[0].id)
    g = g.reshape((*idx.shape, *rest))
    perm = [*range(k, k + ax), *range(k), *range(k + ax, g.rank)]
    env[op.outputs[0]] = g.dim_shuffle(perm)


def _grouped_rows(
    lw: Lowerer, idx: poplar.Tensor, groups: int, n: int, prog: poplar.Sequence, name: str
) -> poplar.Tensor:
    """The row of the ``[groups * n, ...]`` table each index of group ``g`` reads: ``g * n +
    index``, -1 for an index outside ``[0, n)`` (zeros in multi_slice, ignored by the
    updates)."""
    starts = (np.arange(groups, dtype=np.int32) * n).reshape(groups, 1)
    i = signed(idx, pe._1)
    e = pe.Select(pe._2 + i, -1, pe.And(pe.Gte(i, 0), pe.Lt(i, n)))
    per_group = idx.reshape((groups, idx.num_elements // groups))
    starts_t = const(lw, poplar.INT, starts, f"{name}/starts")
    return popops.map(lw.graph, e, [per_group, starts_t], prog, name=f"{name}/rows").flatten()


@rule("GroupedGather")
def grouped_gather(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    """Each group's gathered axis moved next to the group dimension and the rest flattened
    gives one ``[G * n, rest]`` table; one multi_slice reads every group's rows."""
    t, idx = env[op.inputs[0]], env[op.inputs[1]]
    ax, name = op.attrs["axis"], op.outputs[0].id
    perm, rest = grouped_layout(t.shape, ax)
    groups, n = t.shape[0], t.shape[ax]
    table = t.dim_shuffle(perm).reshape((groups * n, math.prod(rest)))
    rows = _grouped_rows(lw, idx, groups, n, prog, name)
    got = popops.multi_slice(lw.graph, table, rows, prog, name=name)
    got = got.reshape((groups, *idx.shape[1:], *rest))
    env[op.outputs[0]] = got.dim_shuffle(grouped_out_perm(idx.rank - 1, ax, got.rank))


@rule("GroupedGatherGrad")
def grouped_gather_grad(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    """The transpose: the gradient's rows scatter-added (multi_update_add) into a zeroed
    ``[G * n, rest]`` table laid out as the forward's."""
    gy, idx = env[op.inputs[0]], env[op.inputs[1]]
    ax, shape, name = op.attrs["axis"], op.attrs["data_shape"], op.outputs[0].id
    perm, rest = grouped_layout(shape, ax)
    groups, n, width = shape[0], shape[ax], math.prod(rest)
    back = np.argsort(grouped_out_perm(idx.rank - 1, ax, gy.rank))
    values = gy.dim_shuffle([int(d) for d in back]).reshape((idx.num_elements, width))
    rows = _grouped_rows(lw, idx, groups, n, prog, name)
    table = lw.new_tensor(None, gy.dtype, (groups, n, *rest), name=name)
    popops.zero(lw.graph, table, prog, name=f"{name}/zero")
    popops.multi_update_add(
        lw.graph, table.reshape((groups * n, width)), rows, values, 1.0, prog, name=name
    )
    env[op.outputs[0]] = table.dim_shuffle([int(d) for d in np.argsort(perm)])


@rule("DynamicSlice")
def dynamic_slice(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    t, index = env[op.inputs[0]], env[op.inputs[1]]
    env[op.outputs[0]] = popops.dynamic_slice(
        lw.graph, t, index.flatten(), list(op.attrs["axes"]), list(op.attrs["sizes"]), prog,
        name=op.outputs[0].id,
    )  # fmt: skip


@rule("DynamicUpdate", "DynamicUpdateInplace")
def dynamic_update(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    t, index, update = (env[i] for i in op.inputs)
    if not op.definition.inplace_of:
        out = lw.new_tensor(op.outputs[0])
        prog.add(poplar.Copy(t, out))
        t = out
    popops.dynamic_update(
        lw.graph, t, update, index.flatten(), list(op.attrs["axes"]), list(op.attrs["sizes"]),
        prog, name=op.outputs[0].id,
    )  # fmt: skip
    env[op.outputs[0]] = t


@rule("OneHot")
def onehot(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    idx, values = env[op.inputs[0]], env[op.inputs[2]].flatten()  # 1: the depth
    n, ax, name = op.attrs["num_classes"], op.attrs["axis"], op.outputs[0].id
    classes = np.arange(n, dtype=np.int32).reshape(
        [n if d == ax else 1 for d in range(idx.rank + 1)]
    )
    arange = const(lw, poplar.INT, classes, f"{name}/classes")
    i = signed(idx, pe._1)
    if idx.dtype is poplar.INT:
        i = wrapped(i, n)
    e = pe.Select(pe._4, pe._3, pe.Equal(i, pe._2))
    env[op.outputs[0]] = popops.map(
        lw.graph, e, [idx.expand([ax]), arange, values[0:1], values[1:2]], prog, name=name
    )
