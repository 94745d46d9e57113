"""Neural-network ONNX ops: Gemm, softmax family, convolution and pooling, normalisations,
dropout. ``node.training`` selects batch statistics (batch norm, whose running statistics
are then replaced after the step, as PopART's training batch norm does) and random dropout."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tremula.popxl import ops


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _gemm(node: Any) -> list[Any]:
    a, b = node.tensor(0), node.tensor(1)
    if int(node.attr("transA", 0)):
        a = ops.transpose(a)
    if int(node.attr("transB", 0)):
        b = ops.transpose(b)
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    y = ops.matmul(a, b)
    if alpha != 1.0:
        y = ops.mul(y, alpha)
    if node.has(2) and beta != 0.0:
        c = node.tensor(2)
        y = ops.add(y, c if beta == 1.0 else ops.mul(c, beta))
    return [y]


def _coerced(node: Any, fn: Callable[[Any, int], Any]) -> list[Any]:
    """Softmax-like ops: along one axis from opset 13; before, over the input coerced to 2D
    at ``axis`` (every dim from ``axis`` on is one row)."""
    x = node.tensor(0)
    rank = len(x.shape)
    if node.version >= 13:
        return [fn(x, _axis(int(node.attr("axis", -1)), rank))]
    axis = _axis(int(node.attr("axis", 1)), rank)
    if axis == rank - 1:
        return [fn(x, axis)]
    flat = ops.reshape(x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))
    return [ops.reshape(fn(flat, 1), x.shape)]


def _log_softmax(x: Any, axis: int) -> Any:
    return ops.sub(x, ops.logsumexp(x, axis, keepdims=True))


def _window(node: Any, rank: int) -> dict[str, Any]:
    """Kernel, strides, pads, dilations and auto_pad of a conv or pooling node."""
    n = rank - 2
    auto = node.attr("auto_pad", "NOTSET")
    return {
        "stride": node.attr("strides") or [1] * n,
        "padding": node.attr("pads") or [0] * (2 * n),
        "dilation": node.attr("dilations") or [1] * n,
        "pad_type": {
            "NOTSET": "not_set",
            "SAME_UPPER": "same_upper",
            "SAME_LOWER": "same_lower",
            "VALID": "valid",
        }[auto],
    }


def _channel_bias(y: Any, bias: Any) -> Any:
    return ops.add(y, ops.reshape(bias, (1, bias.shape[0]) + (1,) * (len(y.shape) - 2)))


def _conv(node: Any) -> list[Any]:
    x, w = node.tensor(0), node.tensor(1)
    win = _window(node, len(x.shape))
    y = ops.conv(
        x,
        w,
        win["stride"],
        win["padding"],
        win["dilation"],
        int(node.attr("group", 1)),
        win["pad_type"],
    )
    return [_channel_bias(y, node.tensor(2)) if node.has(2) else y]


def _conv_transpose(node: Any) -> list[Any]:
    x, w = node.tensor(0), node.tensor(1)
    win = _window(node, len(x.shape))
    y = ops.conv_transpose(
        x,
        w,
        win["stride"],
        win["padding"],
        win["dilation"],
        int(node.attr("group", 1)),
        win["pad_type"],
        node.attr("output_padding") or (),
        node.attr("output_shape") or (),
    )
    return [_channel_bias(y, node.tensor(2)) if node.has(2) else y]


def _pad_share(node: Any, shape: Any, kernel: Any, win: dict[str, Any], out: Any) -> Any:
    """A constant ``[1, 1, *out_spatial]``: the share of each window inside the input, by
    which an average over the input elements becomes one over the whole window (pads
    counted as zeros: ``count_include_pad``)."""
    n = len(kernel)
    share = np.ones((1, 1), np.float64)
    for d in range(n):
        size, k, s, pad = (
            shape[2 + d],
            int(kernel[d]),
            int(win["stride"][d]),
            int(win["padding"][d]),
        )
        start = np.arange(out[2 + d]) * s - pad
        inside = np.minimum(start + k, size) - np.maximum(start, 0)
        share = share[..., None] * (inside / k)
    dtype = node.value(0).dtype.as_numpy()
    return node.cx.constant(f"{node.proto.output[0]}/pad_share", share.astype(dtype))


def _pool(kind: str) -> Callable[[Any], list]:
    def rule(node: Any) -> list[Any]:
        if node.n_outputs > 1 and node.proto.output[1]:
            raise node.error("MaxPool's indices output is not supported")
        x = node.tensor(0)
        win = _window(node, len(x.shape))
        kernel = node.attr("kernel_shape")
        ceil = bool(node.attr("ceil_mode", 0))
        if kind == "max":
            return [
                ops.max_pool(
                    x,
                    kernel,
                    win["stride"],
                    win["padding"],
                    None,
                    win["dilation"],
                    None,
                    win["pad_type"],
                    ceil,
                )
            ]
        y = ops.average_pool(
            x, kernel, win["stride"], win["padding"], None, None, None, win["pad_type"], ceil
        )
        if int(node.attr("count_include_pad", 0)) and any(win["padding"]):
            if ceil or win["pad_type"] != "not_set":
                raise node.error("count_include_pad=1 with ceil_mode or auto_pad is not supported")
            y = ops.mul(y, _pad_share(node, x.shape, kernel, win, y.shape))
        return [y]

    return rule


def _global(fn: Callable[..., Any]) -> Callable[[Any], list]:
    def rule(node: Any) -> list[Any]:
        x = node.tensor(0)
        return [fn(x, list(range(2, len(x.shape))), True)]

    return rule


def _batch_norm(node: Any) -> list[Any]:
    x, scale, bias = node.tensor(0), node.tensor(1), node.tensor(2)
    eps, momentum = float(node.attr("epsilon", 1e-5)), float(node.attr("momentum", 0.9))
    training = node.training and int(node.attr("training_mode", 1))
    if not training:
        return [ops.batch_norm_inference(x, scale, bias, node.tensor(3), node.tensor(4), eps)]
    axes = [0, *range(2, len(x.shape))]
    per_channel = (1, x.shape[1]) + (1,) * (len(x.shape) - 2)
    mean = ops.mean(x, axes, keepdims=True)
    centred = ops.sub(x, mean)
    var = ops.mean(ops.mul(centred, centred), axes, keepdims=True)
    inv_std = ops.div(1.0, ops.sqrt(ops.add(var, eps)))  # type: ignore[arg-type]
    y = ops.add(
        ops.mul(ops.mul(centred, inv_std), ops.reshape(scale, per_channel)),
        ops.reshape(bias, per_channel),
    )
    batch_mean = ops.detach(ops.reshape(mean, (x.shape[1],)))
    batch_var = ops.detach(ops.reshape(var, (x.shape[1],)))  # ONNX: the population variance
    run_mean = ops.add(ops.mul(node.tensor(3), momentum), ops.mul(batch_mean, 1.0 - momentum))
    run_var = ops.add(ops.mul(node.tensor(4), momentum), ops.mul(batch_var, 1.0 - momentum))
    for i, new in ((3, run_mean), (4, run_var)):
        if node.cx.graph.initializers.get(node.proto.input[i]) is not None:
            node.update(i, new)
    return [y, run_mean, run_var, batch_mean, batch_var][: node.n_outputs]


def _instance_norm(node: Any) -> list[Any]:
    x = node.tensor(0)
    eps = float(node.attr("epsilon", 1e-5))
    return [ops.group_norm(x, node.tensor(1), node.tensor(2), x.shape[1], eps)]


def _layer_norm(node: Any) -> list[Any]:
    """ONNX LayerNormalization: over the axes from ``axis`` to the last, with ``Scale`` and
    ``B`` of those axes' shape. PopXL's ``layer_norm`` normalises a ``[N, C]`` tensor per
    row, so ``x`` is seen as ``[prod(shape[:axis]), prod(shape[axis:])]`` and reshaped back."""
    x = node.tensor(0)
    shape = tuple(x.shape)
    axis = _axis(int(node.attr("axis", -1)), len(shape))
    rows, cols = int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))
    eps = float(node.attr("epsilon", 1e-5))
    scale = ops.reshape(node.tensor(1), (cols,))
    bias = (
        ops.reshape(node.tensor(2), (cols,))
        if node.has(2)
        else node.cx.constant(f"{node.proto.output[0]}/bias", np.zeros(cols, x.dtype.as_numpy()))
    )
    y = ops.layer_norm(ops.reshape(x, (rows, cols)), scale, bias, eps)
    if node.n_outputs > 1 and any(node.proto.output[1:]):
        raise node.error("LayerNormalization's Mean and InvStdDev outputs are not supported")
    return [ops.reshape(y, shape)]


def _resize_arguments(node: Any, rank: int) -> tuple[list[float] | None, list[int] | None]:
    """Resize's scales or sizes: Upsample-7's attribute, Upsample-9's and Resize-10's
    second input, Resize-11+'s third (scales) or fourth (sizes) input."""
    if node.op_type == "Upsample" and node.version < 9:
        return [float(s) for s in node.attr("scales")], None
    if node.op_type == "Upsample" or node.version < 11:
        return [float(s) for s in np.asarray(node.const(1, "scales")).reshape(-1)], None
    if node.has(3) and np.size(node.const(3, "sizes")):
        return None, node.ints(3, "sizes")
    if node.has(2) and np.size(node.const(2, "scales")):
        return [float(s) for s in np.asarray(node.const(2, "scales")).reshape(-1)], None
    raise node.error("one of scales and sizes must be given")


def _resize(node: Any) -> list[Any]:
    """ONNX Resize (and Upsample): PopXL's ``interpolate``. Before opset 11 (and for
    Upsample) coordinates are ``asymmetric`` and nearest rounds down when enlarging an
    axis, up when shrinking it (onnxruntime's rule), one interpolation per such group of
    axes (nearest and linear are separable)."""
    x = node.tensor(0)
    rank = len(node.shape(0))
    mode = str(node.attr("mode", "nearest")).lower()
    mode = {"bilinear": "linear", "trilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    for name, default in (("exclude_outside", 0), ("antialias", 0)):
        if int(node.attr(name, default)) != default:
            raise node.error(f"{name}={node.attr(name)} is not supported")
    if float(node.attr("cubic_coeff_a", -0.75)) != -0.75:
        raise node.error("only cubic_coeff_a=-0.75 (the default) is supported")
    if node.has_attr("axes") and sorted(_axis(int(a), rank) for a in node.attr("axes")) != list(
        range(rank)
    ):
        raise node.error("Resize over some of the axes (the axes attribute) is not supported")
    scales, sizes = _resize_arguments(node, rank)
    if node.op_type == "Upsample" or node.version < 11:
        return [_resize_asymmetric(node, x, mode, scales or [])]
    transform = str(node.attr("coordinate_transformation_mode", "half_pixel"))
    if transform == "tf_crop_and_resize":
        roi = np.asarray(node.const(1, "roi"), np.float64).reshape(-1) if node.has(1) else None
        if roi is None or not np.array_equal(roi, [0.0] * rank + [1.0] * rank):
            raise node.error("tf_crop_and_resize is supported with the whole input as roi only")
    nearest = str(node.attr("nearest_mode", "round_prefer_floor"))
    if sizes is not None:
        return [ops.interpolate(x, None, mode, nearest, transform, output_size=sizes)]
    return [ops.interpolate(x, scales, mode, nearest, transform)]


def _resize_asymmetric(node: Any, x: Any, mode: str, scales: list[float]) -> Any:
    if len(scales) != len(node.shape(0)):
        raise node.error(f"{len(scales)} scales for an input of rank {len(node.shape(0))}")
    if mode != "nearest":
        return ops.interpolate(x, scales, mode, coordinate_transformation_mode="asymmetric")
    for grow, rounding in ((True, "floor"), (False, "ceil")):
        part = [s if (s >= 1.0) == grow else 1.0 for s in scales]
        if any(s != 1.0 for s in part):
            x = ops.interpolate(x, part, "nearest", rounding, "asymmetric")
    return x


def _lrn(node: Any) -> list[Any]:
    """ONNX LRN: ``x / (bias + alpha / size * s) ** beta``, ``s`` the sum of squares over
    the ``size`` channels around each one (``floor((size-1)/2)`` before, ``ceil`` after;
    zeros past the edges), as ``size`` shifted slices of the zero-padded squares."""
    x = node.tensor(0)
    size = int(node.attr("size"))
    alpha, beta = float(node.attr("alpha", 1e-4)), float(node.attr("beta", 0.75))
    bias = float(node.attr("bias", 1.0))
    c = x.shape[1]
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    zeros = {}
    for n, where in ((before, "before"), (after, "after")):
        shape = list(x.shape)
        shape[1] = n
        zeros[where] = node.cx.constant(
            f"{node.proto.output[0]}/{where}", np.zeros(shape, x.dtype.as_numpy())
        )
    squares = ops.mul(x, x)
    parts = [p for p, n in ((zeros["before"], before), (squares, 1), (zeros["after"], after)) if n]
    padded = ops.concat(parts, 1) if len(parts) > 1 else squares
    total = ops.slice(padded, [0], [c], [1], [1])
    for j in range(1, size):
        total = ops.add(total, ops.slice(padded, [j], [j + c], [1], [1]))
    return [ops.div(x, ops.pow(ops.add(ops.mul(total, alpha / size), bias), beta))]


def _mean_variance_normalization(node: Any) -> list[Any]:
    """ONNX MeanVarianceNormalization: ``(x - mean) / sqrt(mean((x - mean)^2))`` over
    ``axes`` (default ``[0, 2, 3]``), as ONNX's function body (no epsilon)."""
    x = node.tensor(0)
    rank = len(x.shape)
    axes = [_axis(int(a), rank) for a in node.attr("axes", [0, 2, 3])]
    centred = ops.sub(x, ops.mean(x, axes, True))
    return [ops.div(centred, ops.sqrt(ops.mean(ops.mul(centred, centred), axes, True)))]


def _group_norm(node: Any) -> list[Any]:
    """ONNX GroupNormalization: opset 18's scale and bias are per group, opset 21's per
    channel (PopXL's ``group_norm``: per channel)."""
    x = node.tensor(0)
    groups = int(node.attr("num_groups"))
    scale, bias = node.tensor(1), node.tensor(2)
    if node.version < 21 and scale.shape[0] != x.shape[1]:
        channel_group = np.repeat(np.arange(groups, dtype=np.int32), x.shape[1] // groups)
        scale, bias = ops.gather(scale, channel_group), ops.gather(bias, channel_group)
    return [ops.group_norm(x, scale, bias, groups, float(node.attr("epsilon", 1e-5)))]


def _dropout(node: Any) -> list[Any]:
    x = node.tensor(0)
    ratio = (
        float(node.attr("ratio", 0.5))
        if node.version < 12 or not node.has(1)
        else float(node.const(1))
    )
    train = node.training and not (node.has(2) and not bool(node.const(2)))
    if node.n_outputs > 1 and node.proto.output[1]:
        raise node.error("Dropout's mask output is not supported")
    if not train or ratio == 0.0:
        return [x]
    return [ops.dropout(x, node.seed(), ratio)]


def _gelu(node: Any) -> list[Any]:
    x = node.tensor(0)
    return [ops.gelu(x) if node.attr("approximate", "none") == "tanh" else ops.geluerf(x)]


NN: dict[str, Callable[[Any], list]] = {
    "Gemm": _gemm,
    "Softmax": lambda node: _coerced(node, lambda x, a: ops.softmax(x, a)),
    "LogSoftmax": lambda node: _coerced(node, _log_softmax),
    "Conv": _conv,
    "ConvTranspose": _conv_transpose,
    "MaxPool": _pool("max"),
    "AveragePool": _pool("average"),
    "GlobalAveragePool": _global(ops.mean),
    "GlobalMaxPool": _global(ops.max),
    "BatchNormalization": _batch_norm,
    "InstanceNormalization": _instance_norm,
    "LayerNormalization": _layer_norm,
    "Resize": _resize,
    "LRN": _lrn,
    "GroupNormalization": _group_norm,
    "MeanVarianceNormalization": _mean_variance_normalization,
    "Upsample": _resize,
    "Dropout": _dropout,
    "Gelu": _gelu,
}
