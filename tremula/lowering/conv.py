"""Lowering of ``popxl/ops/conv.py`` by im2col: the input (padded into a filled copy when
there is padding) is viewed once per kernel position with the stride and dilation, the
views are copied into one ``[N, C, K, *out]`` patch tensor, and then

* ``Conv``: one grouped poplin matmul ``[G, N * out, C/G * K] @ [G, C/G * K, C_out/G]``
  (its ``partialsType`` the op's ``partials_type`` where set);
* ``ConvTranspose``: the input spread out with ``stride - 1`` zeros between elements and
  ``dilation (kernel - 1)`` zeros around (cropped by the padding), convolved with the
  weights flipped and their channel axes swapped;
* ``Pool``: a popops MAX reduction over the kernel axis (padding ``-inf``), or an ADD
  reduction divided by the constant count of window elements inside the input.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from tremula import poplar
from tremula.libs import poplin, popops
from tremula.libs.popops import expr as pe
from tremula.lowering.driver import Env, Lowerer, rule
from tremula.lowering.tensor_ops import matmul_options
from tremula.popxl.ops.base import OpNode
from tremula.popxl.ops.conv import patches_np


def _padded(lw: Lowerer, x: poplar.Tensor, a: dict, fill: float, prog: poplar.Sequence, name: str):
    """``x`` inside a copy filled with ``fill``, large enough for every output window."""
    windows = [d * (k - 1) + 1 for k, d in zip(a["kernel"], a["dilation"])]
    need = [(o - 1) * s + w for o, s, w in zip(a["out"], a["stride"], windows)]
    begin = a["pads_begin"]
    if not any(begin) and all(q <= s for q, s in zip(need, x.shape[2:])):
        return x
    shape = (*x.shape[:2], *(max(q, s + b) for q, s, b in zip(need, x.shape[2:], begin)))
    xp = lw.new_tensor(None, x.dtype, shape, f"{name}/padded")
    popops.fill(lw.graph, xp, fill, prog, name=f"{name}/pad")
    inner = tuple(slice(b, b + s) for b, s in zip(begin, x.shape[2:]))
    index = (slice(None), slice(None), *inner)
    prog.add(poplar.Copy(x, xp[index]))
    return xp


def _patches(lw: Lowerer, x: poplar.Tensor, a: dict, fill: float, prog: poplar.Sequence, name: str):
    """``[N, C, K, *out]``: the im2col copy of ``x``'s windows."""
    xp = _padded(lw, x, a, fill, prog, name)
    views = []
    for k in itertools.product(*[range(kk) for kk in a["kernel"]]):
        key = tuple(
            slice(ki * d, ki * d + s * (o - 1) + 1, s)
            for ki, d, s, o in zip(k, a["dilation"], a["stride"], a["out"])
        )
        index = (slice(None), slice(None), *key)
        views.append(xp[index].expand([2]))
    cols = poplar.concat(views, 2)
    out = lw.new_tensor(None, x.dtype, cols.shape, f"{name}/patches")
    prog.add(poplar.Copy(cols, out))
    return out


def _conv(lw: Lowerer, x, w, a: dict, groups: int, prog: poplar.Sequence, name: str, options):
    """``[N, C_out, *out]`` from ``x`` ``[N, C, *spatial]`` and ``w`` ``[C_out, C/G, *k]``;
    ``options``: the matmul's PopLin options (its ``partialsType``)."""
    n, c = x.shape[:2]
    oc, g, out = w.shape[0], groups, a["out"]
    cols = _patches(lw, x, a, 0.0, prog, name)  # [N, C, K, *out]
    k = cols.shape[2]
    m = n * math.prod(out)
    r = len(out)
    lhs = cols.reshape((n, g, c // g, k, *out))
    lhs = lhs.dim_shuffle([1, 0, *range(4, 4 + r), 2, 3]).reshape((g, m, c // g * k))
    rhs = w.reshape((g, oc // g, c // g * k)).dim_shuffle([0, 2, 1])
    y = poplin.matmul_grouped(lw.graph, lhs, rhs, prog, name=name, options=options)
    y = y.reshape((g, n, *out, oc // g)).dim_shuffle([1, 0, r + 2, *range(2, r + 2)])
    return y.reshape((n, oc, *out))


@rule("Conv")
def conv(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    x, w = env[op.inputs[0]], env[op.inputs[1]]
    a, name = op.attrs, op.outputs[0].id
    env[op.outputs[0]] = _conv(lw, x, w, a, a["groups"], prog, name, matmul_options(op))


@rule("ConvTranspose")
def conv_transpose(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    x, w = env[op.inputs[0]], env[op.inputs[1]]
    a, name = op.attrs, op.outputs[0].id
    n, c, *spatial = x.shape
    g, oc, kernel = a["groups"], a["out_channels"], a["kernel"]
    edge = [d * (k - 1) for k, d in zip(kernel, a["dilation"])]
    full = [(s - 1) * st + 1 + 2 * e + op_ for s, st, e, op_ in zip(
        spatial, a["stride"], edge, a["output_padding"])]  # fmt: skip
    z = lw.new_tensor(None, x.dtype, (n, c, *full), f"{name}/spread")
    popops.zero(lw.graph, z, prog, name=f"{name}/zero")
    spread = tuple(
        slice(e, e + st * (s - 1) + 1, st) for e, st, s in zip(edge, a["stride"], spatial)
    )
    index = (slice(None), slice(None), *spread)
    prog.add(poplar.Copy(x, z[index]))
    crop = tuple(slice(b, f - e) for b, e, f in zip(a["pads_begin"], a["pads_end"], full))
    index = (slice(None), slice(None), *crop)
    zc = z[index]
    wf = w.reshape((g, c // g, oc // g, *kernel)).dim_shuffle([0, 2, 1, *range(3, 3 + len(kernel))])
    wf = wf.reshape((oc, c // g, *kernel))
    for d in range(2, wf.rank):
        wf = wf.reverse(d)
    wc = lw.new_tensor(None, w.dtype, wf.shape, f"{name}/weights")
    prog.add(poplar.Copy(wf, wc))
    geometry = {"kernel": kernel, "stride": (1,) * len(kernel), "dilation": a["dilation"],
                "pads_begin": (0,) * len(kernel), "out": a["out"]}  # fmt: skip
    env[op.outputs[0]] = _conv(lw, zc, wc, geometry, g, prog, name, matmul_options(op))


@rule("MaxPool", "AveragePool")
def pool(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    x, a, name = env[op.inputs[0]], op.attrs, op.outputs[0].id
    if a["mode"] == "max":
        cols = _patches(lw, x, a, float("-inf"), prog, name)
        env[op.outputs[0]] = popops.reduce(
            lw.graph, cols, [2], popops.Operation.MAX, prog, name=name
        )
        return
    cols = _patches(lw, x, a, 0.0, prog, name)
    total = popops.reduce(lw.graph, cols, [2], popops.Operation.ADD, prog, name=name)
    count = patches_np(np.ones((1, 1, *x.shape[2:])), a, 0.0).sum(axis=2)
    c = lw.graph.add_constant(
        x.dtype, count.shape, count.astype(x.dtype.numpy), lw.name(f"{name}/count")
    )
    poplar.map_tensor_linearly(lw.graph, c, grain_size=lw.graph.target.vector_width(x.dtype.size))
    popops.map_in_place(lw.graph, pe._1 / pe._2, [total, c], prog, name=f"{name}/mean")
    env[op.outputs[0]] = total
