"""Gradient rules of ``popxl/ops/conv.py``.

A convolution's input gradient is the transposed convolution of the output gradient with
the same weights (and the other way round); a weight gradient is a convolution that
correlates the input with the output gradient over the batch (batch and channel axes
swapped, stride and dilation exchanged), of which each group keeps its diagonal block.
Pooling's input gradient adds each window's share back, one kernel position at a time.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from tremula.popxl import ops
from tremula.popxl.ops.base import OpNode, create_op
from tremula.popxl.ops.conv import patches_np
from tremula.popxl.tensor import Tensor, constant
from tremula.popxl.transforms.grads.base import (
    GradContext,
    Grads,
    OutputGrads,
    as_float,
    grad,
    pick,
)
from tremula.popxl.transforms.grads.tensor_ops import scatter_into_zeros


def _swap01(t: Tensor) -> Tensor:
    return ops.transpose(t, (1, 0, *range(2, t.rank)))


def _partials(a: dict) -> dict:
    """The forward convolution's partials type, which its gradient convolutions take (as
    PopART's grad ops take the forward op's convolution options)."""
    return {k: a[k] for k in ("partials_type",) if k in a}


def _correlate(inp: Tensor, out_grad: Tensor, a: dict, kernel: Sequence[int]) -> Tensor:
    """``[C_inp, C_grad, *kernel]``: the sum over the batch and the output positions ``o``
    of ``inp_padded[n, ci, o * stride + k * dilation] * out_grad[n, co, o]``."""
    spatial = inp.shape[2:]
    need = [
        (k - 1) * d + (o - 1) * s + 1
        for k, d, o, s in zip(kernel, a["dilation"], out_grad.shape[2:], a["stride"])
    ]
    attrs = {
        "kernel": out_grad.shape[2:],
        "stride": a["dilation"],
        "dilation": a["stride"],
        "pads_begin": a["pads_begin"],
        "pads_end": tuple(max(q - s - b, 0) for q, s, b in zip(need, spatial, a["pads_begin"])),
        "out": tuple(kernel),
        "groups": 1,
        **_partials(a),
    }
    return create_op("Conv", [_swap01(inp), _swap01(out_grad)], attrs)[0]


def _diagonal_blocks(full: Tensor, groups: int) -> Tensor:
    """``[R, S, *k]`` -> ``[S, R / groups, *k]``: group ``g``'s block of rows and columns,
    transposed, the groups stacked."""
    if groups == 1:
        return _swap01(full)
    rows, cols = full.shape[0] // groups, full.shape[1] // groups
    blocks = [
        _swap01(
            create_op(
                "Slice",
                [full],
                {"key": (slice(g * rows, (g + 1) * rows), slice(g * cols, (g + 1) * cols))},
            )[0]
        )
        for g in range(groups)
    ]
    return create_op("Concat", blocks, {"axis": 0})[0]


@grad("Conv")
def _conv(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    x, w = op.inputs
    a = op.attrs

    def grad_x() -> Tensor:
        windows = [d * (k - 1) + 1 for k, d in zip(a["kernel"], a["dilation"])]
        output_padding = tuple(
            s_in - (s * (o - 1) + win - b - e)
            for s_in, s, o, win, b, e in zip(
                x.shape[2:], a["stride"], a["out"], windows, a["pads_begin"], a["pads_end"]
            )
        )
        attrs = {
            **{k: a[k] for k in ("kernel", "stride", "dilation", "pads_begin", "pads_end")},
            "output_padding": output_padding,
            "out": x.shape[2:],
            "groups": a["groups"],
            "out_channels": x.shape[1],
            **_partials(a),
        }
        return create_op("ConvTranspose", [g[0], c.fwd(w)], attrs)[0]

    def grad_w() -> Tensor:
        return _diagonal_blocks(_correlate(c.fwd(x), g[0], a, a["kernel"]), a["groups"])

    return pick(need, grad_x, grad_w)


@grad("ConvTranspose")
def _conv_transpose(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    x, w = op.inputs
    a = op.attrs

    def grad_x() -> Tensor:
        attrs = {
            **{k: a[k] for k in ("kernel", "stride", "dilation", "pads_begin", "pads_end")},
            "out": x.shape[2:],
            "groups": a["groups"],
            **_partials(a),
        }
        return create_op("Conv", [g[0], c.fwd(w)], attrs)[0]

    def grad_w() -> Tensor:
        return _diagonal_blocks(_correlate(g[0], c.fwd(x), a, a["kernel"]), a["groups"])

    return pick(need, grad_x, grad_w)


@grad("MaxPool", "AveragePool")
def _pool(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """Average: each window's gradient shared by its elements inside the input; max: the
    window's gradient to the elements equal to its maximum."""
    x, a = op.inputs[0], op.attrs
    spatial = x.shape[2:]
    windows = [d * (k - 1) + 1 for k, d in zip(a["kernel"], a["dilation"])]
    reach = [(o - 1) * s + win for o, s, win in zip(a["out"], a["stride"], windows)]
    padded = (
        *x.shape[:2],
        *(max(q, s + b) for q, s, b in zip(reach, spatial, a["pads_begin"])),
    )
    inner = (slice(None), slice(None), *(slice(b, b + s) for b, s in zip(a["pads_begin"], spatial)))
    if a["mode"] == "max":
        y = c.fwd(op.outputs[0])
        xp = c.fwd(x)
        if padded != x.shape:  # padding is -inf: never the maximum
            fill = np.full((1, 1, *padded[2:]), -np.inf, x.dtype.as_numpy())
            fill[inner] = 0
            xp = scatter_into_zeros(xp, padded, inner) + constant(fill, name="pool_padding")
    else:
        count = patches_np(np.ones((1, 1, *spatial)), a, 0.0).sum(axis=2)
        share = g[0] * constant((1 / count).astype(x.dtype.as_numpy()), name="pool_count")
    total = None
    for k in itertools.product(*(range(kk) for kk in a["kernel"])):
        key = (
            slice(None),
            slice(None),
            *(
                slice(ki * d, ki * d + s * (o - 1) + 1, s)
                for ki, d, s, o in zip(k, a["dilation"], a["stride"], a["out"])
            ),
        )
        if a["mode"] == "max":
            seen = create_op("Slice", [xp], {"key": key})[0]
            share = g[0] * as_float(ops.equal(seen, y), g[0])
        part = scatter_into_zeros(share, padded, key)
        total = part if total is None else total + part
    assert total is not None
    if padded == x.shape:
        return [total]
    return [create_op("Slice", [total], {"key": inner})[0]]
