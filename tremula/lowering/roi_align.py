"""Lowering of ``popxl/ops/roi_align.py``. The sample plan is computed on the device from the
rois (popops maps, one axis at a time, then one map each for the corner pixels and their
weights). The forward pass gathers the corner pixels as rows of the input viewed as
``[N * H * W, C]`` (``popops.multi_slice``), weights them and sums each bin
(``popops.reduce``). The transpose scatter-adds the weighted output gradients into those
rows (``popops.multi_update_add``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tremula import poplar
from tremula.libs import popops
from tremula.libs.popops import expr as pe
from tremula.lowering.driver import Env, Lowerer, rule
from tremula.lowering.gather import const, signed
from tremula.popxl.ops.base import OpNode
from tremula.popxl.ops.roi_align import sample_steps


def _as_float(t: poplar.Tensor, e: pe.Expr) -> pe.Expr:
    return e if t.dtype is poplar.FLOAT else pe.Cast(e, poplar.FLOAT)


def _axis_samples(
    lw: Lowerer,
    rois: poplar.Tensor,
    cols: tuple[int, int],
    size: int,
    bins: int,
    a: dict[str, Any],
    prog: poplar.Sequence,
    name: str,
) -> tuple[poplar.Tensor, poplar.Tensor]:
    """Along one axis (roi columns ``cols`` = start, end): the samples' two neighbours
    ``[K, bins * ratio, 2]`` (int, -1 outside ``[-1, size]``) and their weights (float, 0
    there), as ``popxl/ops/roi_align.py::_axis_samples`` computes them."""
    g = lw.graph
    shift = 0.5 if a["aligned"] else 0.0
    steps = sample_steps(bins, a["sampling_ratio"]).astype(np.float32)[None, :]
    start = _as_float(rois, pe._1) * a["spatial_scale"] - shift
    length = (_as_float(rois, pe._2) * a["spatial_scale"] - shift) - start
    if not a["aligned"]:
        length = pe.Max(length, 1.0)
    coord = popops.map(
        g,
        start + pe._3 * (length / float(bins)),
        [rois[:, cols[0] : cols[0] + 1], rois[:, cols[1] : cols[1] + 1],
         const(lw, poplar.FLOAT, steps, f"{name}/steps")],
        prog,
        name=f"{name}/coord",
    )  # fmt: skip
    valid = pe.And(pe.Gte(pe._1, -1.0), pe.Lte(pe._1, float(size)))
    low = pe.Floor(pe.Max(pe._1, 0.0))
    frac = pe.Select(0.0, pe.Max(pe._1, 0.0) - low, pe.Gte(low, float(size - 1)))
    exprs = {
        "lo": pe.Select(pe.Cast(pe.Min(low, float(size - 1)), poplar.INT), -1, valid),
        "hi": pe.Select(pe.Cast(pe.Min(low + 1.0, float(size - 1)), poplar.INT), -1, valid),
        "wlo": pe.Select(1.0 - frac, 0.0, valid),
        "whi": pe.Select(frac, 0.0, valid),
    }
    out = {k: popops.map(g, e, [coord], prog, name=f"{name}/{k}") for k, e in exprs.items()}
    pair = [
        poplar.concat([out[lo].expand([2]), out[hi].expand([2])], 2)
        for lo, hi in (("lo", "hi"), ("wlo", "whi"))
    ]
    return pair[0], pair[1]


def sample_plan(
    lw: Lowerer, op: OpNode, env: Env, in_shape: tuple[int, ...], prog: poplar.Sequence, name: str
) -> tuple[poplar.Tensor, poplar.Tensor]:
    """``(rows, weights)`` on the device: the flat ``[M]`` int rows of ``[N * H * W, C]``
    each corner reads (-1 for none), and ``[K, out_h, ratio, out_w, ratio, 4, 1]`` float
    weights, laid out as ``popxl/ops/roi_align.py::sample_plan`` lays them out."""
    a = op.attrs
    rois, bidx = env[op.inputs[1]], env[op.inputs[2]]
    n, _, h, w = in_shape
    (oh, ow), r = a["output_size"], a["sampling_ratio"]
    k = rois.shape[0]
    y, wy = _axis_samples(lw, rois, (1, 3), h, oh, a, prog, f"{name}/y")
    x, wx = _axis_samples(lw, rois, (0, 2), w, ow, a, prog, f"{name}/x")
    y, wy = (v.reshape((k, oh, r, 1, 1, 2, 1)) for v in (y, wy))
    x, wx = (v.reshape((k, 1, 1, ow, r, 1, 2)) for v in (x, wx))
    b = signed(bidx, pe._1)
    inside = pe.And(pe.And(pe.Gte(pe._2, 0), pe.Gte(pe._3, 0)), pe.And(pe.Gte(b, 0), pe.Lt(b, n)))
    rows = popops.map(
        lw.graph,
        pe.Select((b * h + pe._2) * w + pe._3, -1, inside),
        [bidx.reshape((k, 1, 1, 1, 1, 1, 1)), y, x],
        prog,
        name=f"{name}/rows",
    )
    weights = popops.map(
        lw.graph, pe._1 * pe._2 * (1.0 / (r * r)), [wy, wx], prog, name=f"{name}/weights"
    )
    return rows.flatten(), weights.reshape((k, oh, r, ow, r, 4, 1))


@rule("RoiAlign")
def roi_align(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    t = env[op.inputs[0]]
    n, c, h, w = t.shape
    name = op.outputs[0].id
    rows, weights = sample_plan(lw, op, env, t.shape, prog, name)
    table = t.dim_shuffle([0, 2, 3, 1]).reshape((n * h * w, c))
    picked = popops.multi_slice(lw.graph, table, rows, prog, name=f"{name}/gather")
    picked = picked.reshape((*weights.shape[:-1], c))
    weighted = popops.map(
        lw.graph, _as_float(t, pe._1) * pe._2, [picked, weights], prog, name=f"{name}/weighted"
    )
    out = popops.reduce(
        lw.graph, weighted, [2, 4, 5], popops.Operation.ADD, prog, name=name, out_dtype=t.dtype
    )  # [K, out_h, out_w, C]
    env[op.outputs[0]] = out.dim_shuffle([0, 3, 1, 2])


@rule("RoiAlignGrad")
def roi_align_grad(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    gy = env[op.inputs[0]]
    k, c, oh, ow = gy.shape
    n, _, h, w = op.attrs["input_shape"]
    name = op.outputs[0].id
    rows, weights = sample_plan(lw, op, env, op.attrs["input_shape"], prog, name)
    value = _as_float(gy, pe._1) * pe._2
    if gy.dtype is not poplar.FLOAT:
        value = pe.Cast(value, gy.dtype)
    spread = popops.map(
        lw.graph,
        value,
        [gy.dim_shuffle([0, 2, 3, 1]).reshape((k, oh, 1, ow, 1, 1, c)), weights],
        prog,
        name=f"{name}/weighted",
    )
    out = lw.new_tensor(None, gy.dtype, (n, h, w, c), name=name)
    popops.zero(lw.graph, out, prog, name=f"{name}/zero")
    popops.multi_update_add(
        lw.graph, out.reshape((n * h * w, c)), rows, spread.reshape((rows.num_elements, c)), 1.0,
        prog, name=f"{name}/scatter",
    )  # fmt: skip
    env[op.outputs[0]] = out.dim_shuffle([0, 3, 1, 2])
