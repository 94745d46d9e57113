"""Convolutions and pooling (N-d, channels first): ``conv``, ``conv_transpose``,
``average_pool``, ``max_pool`` and :class:`PadType`.

Padding is ONNX's: ``padding`` lists the pads before each spatial axis, then after each;
``pad_type`` / ``auto_pad`` ``"same_upper"`` / ``"same_lower"`` pad so that the output
size is ``ceil(input / stride)`` (the odd pad after / before), ``"valid"`` pads nothing.
Average pooling divides by the number of window elements inside the input (padding not
counted, ONNX's ``count_include_pad=0``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tremula._compat import StrEnum
from tremula.errors import OpSetupError, OpSetupTypeError
from tremula.popxl.ops.base import create_op, defop
from tremula.popxl.ops.shape import check_tensor
from tremula.popxl.ops.tensor_ops import partials_of
from tremula.popxl.tensor import Tensor, TensorSpec


class PadType(StrEnum):
    """Automatic padding modes (PopXL's ``PadType``); plain strings are accepted too."""

    NOT_SET = "not_set"
    SAME_UPPER = "same_upper"
    SAME_LOWER = "same_lower"
    VALID = "valid"

    def __str__(self) -> str:
        return str(self.value)


def pad_mode(pad_type: PadType | str) -> PadType:
    """``pad_type`` as a :class:`PadType` (``ValueError`` naming the choices otherwise)."""
    value = pad_type.value if isinstance(pad_type, PadType) else str(pad_type).lower()
    if value not in PadType.__members__.values():
        raise ValueError(
            f"pad_type {pad_type!r} is not valid: it must be one of "
            f"{', '.join(m.value for m in PadType)}"
        )
    return PadType(value)


def _ints(v: Any, n: int, default: int, what: str, arg: str) -> tuple[int, ...]:
    if v is None or (isinstance(v, Sequence) and len(v) == 0):
        return (default,) * n
    out = tuple(int(x) for x in (v if isinstance(v, Sequence) else [v] * n))
    if len(out) != n:
        raise ValueError(f"{what}: {arg} {tuple(v)} must have {n} entries")
    return out


def _channels_and(spatial: tuple[slice, ...]) -> tuple[slice, ...]:
    """An index of every batch and channel, and ``spatial`` on the spatial axes."""
    return (slice(None), slice(None), *spatial)


def _window(kernel: tuple[int, ...], dilation: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation))


def _geometry(
    what: str,
    t: Tensor,
    kernel: tuple[int, ...],
    stride: Any,
    padding: Any,
    dilation: Any,
    pad_type: Any,
    ceil_mode: bool = False,
) -> dict[str, Any]:
    """The attributes of a windowed op: kernel, stride, dilation, pads (after resolving
    ``pad_type``) and the output's spatial shape."""
    n = len(kernel)
    spatial = t.shape[2:]
    stride = _ints(stride, n, 1, what, "stride")
    dilation = _ints(dilation, n, 1, what, "dilation")
    if min(stride + dilation + kernel, default=1) < 1:
        raise ValueError(
            f"{what}: kernel {kernel}, stride {stride}, dilation {dilation} must be >= 1"
        )
    mode = pad_mode(pad_type)
    window = _window(kernel, dilation)
    if mode is PadType.NOT_SET:
        pads = _ints(padding, 2 * n, 0, what, "padding")
        begin, end = pads[:n], pads[n:]
    elif mode is PadType.VALID:
        begin = end = (0,) * n
    else:
        total = [
            max((math.ceil(s / st) - 1) * st + w - s, 0)
            for s, st, w in zip(spatial, stride, window)
        ]
        small = tuple(p // 2 for p in total)
        big = tuple(p - p // 2 for p in total)
        begin, end = (small, big) if mode is PadType.SAME_UPPER else (big, small)
    if min(begin + end, default=0) < 0:
        raise ValueError(f"{what}: padding {begin + end} must be non-negative")
    out = []
    for s, b, e, w, st in zip(spatial, begin, end, window, stride):
        span = s + b + e - w
        o = (math.ceil(span / st) if ceil_mode else span // st) + 1
        if ceil_mode and (o - 1) * st >= s + b:  # a window must start inside the input
            o -= 1
        if span < 0 or o < 1:  # PopART's HasReceptiveFieldOp::setup refuses it
            raise OpSetupError(
                f"{what}: the window {w} (kernel {kernel}, dilation {dilation}) does not fit "
                f"{t.id!r} of spatial shape {spatial} padded by {begin} / {tuple(end)}"
            )
        out.append(o)
    return {
        "kernel": tuple(kernel),
        "stride": stride,
        "dilation": dilation,
        "pads_begin": tuple(begin),
        "pads_end": tuple(end),
        "out": tuple(out),
    }


def patches_np(x: np.ndarray, a: dict[str, Any], fill: float) -> np.ndarray:
    """``[N, C, K, *out]``: the input element under each kernel position of each output
    window (``fill`` outside the input); the reference of the lowering's im2col."""
    n = x.ndim - 2
    need = [
        (o - 1) * s + w
        for o, s, w in zip(a["out"], a["stride"], _window(a["kernel"], a["dilation"]))
    ]
    after = [max(q - (sz + b), 0) for q, sz, b in zip(need, x.shape[2:], a["pads_begin"])]
    xp = np.pad(x, [(0, 0), (0, 0), *zip(a["pads_begin"], after)], constant_values=fill)
    views = []
    for k in itertools.product(*[range(kk) for kk in a["kernel"]]):
        key = tuple(
            slice(ki * d, ki * d + s * (o - 1) + 1, s)
            for ki, d, s, o in zip(k, a["dilation"], a["stride"], a["out"])
        )
        views.append(xp[_channels_and(key)])
    return np.stack(views, axis=2).reshape(*x.shape[:2], -1, *a["out"][:n])


def _conv_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    t, w = x[0].astype(np.float64), x[1].astype(np.float64)
    g = a["groups"]
    p = patches_np(t, a, 0.0)  # [N, C, K, *O]
    n, c = t.shape[:2]
    p = p.reshape(n, g, c // g, -1, *a["out"])
    wg = w.reshape(g, w.shape[0] // g, c // g, -1)
    out = np.einsum("ngck...,gock->ngo...", p, wg).reshape(n, w.shape[0], *a["out"])
    return [out.astype(x[0].dtype)]


def _conv_spec(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    t, w = specs
    return [TensorSpec((t.shape[0], w.shape[0], *a["out"]), t.dtype)]


defop("Conv", _conv_spec, _conv_ref, float_inputs=(0, 1))


def _check_conv(what: str, t: Tensor, weight: Tensor, groups: int) -> None:
    check_tensor(t, what)
    check_tensor(weight, what, "weight")
    if weight.dtype != t.dtype:
        raise OpSetupTypeError(
            f"{what}: weight {weight.id!r} is {weight.dtype}, t {t.id!r} is {t.dtype}"
        )
    check_conv_shapes(what, t, weight, groups)


def check_conv_shapes(what: str, t: Tensor, weight: Tensor, groups: int) -> None:
    """``ValueError`` unless ``t`` is ``[N, C, *spatial]``, ``weight`` has its rank and
    ``groups`` divides the channels (types are the caller's to check); the groups are
    checked by PopART's op setup, so that error is a ``popart.popart_exception`` too."""
    if t.rank < 3 or weight.rank != t.rank:
        raise ValueError(
            f"{what}: t {t.id!r} {t.shape} must be [N, C, *spatial] and weight {weight.id!r} "
            f"{weight.shape} of the same rank"
        )
    if int(groups) != groups or groups < 1 or t.shape[1] % groups:
        raise OpSetupError(
            f"{what}: groups {groups!r} must divide the {t.shape[1]} channels of {t.id!r}"
        )


def conv(
    t: Tensor,
    weight: Tensor,
    stride: Sequence[int] = (1, 1),
    padding: Sequence[int] = (0, 0, 0, 0),
    dilation: Sequence[int] = (1, 1),
    groups: int = 1,
    pad_type: PadType | str = "not_set",
    available_memory_proportions: Any = None,
    partials_types: Any = None,
    enable_conv_dithering: Any = None,
) -> Tensor:
    """N-d cross-correlation: ``t`` ``[N, C, *spatial]`` with ``weight``
    ``[C_out, C / groups, *kernel]`` (ONNX Conv). ``partials_types``: the one convolution's
    partials type, ``["float"]`` or ``["half"]`` (used for float16 operands); by default
    the Ir's session option ``convolutionOptions["partialsType"]``, else float.
    ``available_memory_proportions`` and ``enable_conv_dithering`` are planning hints,
    accepted and not used.

    Raises:
        ValueError: shapes that do not fit, groups not dividing the channels, bad padding,
            a partials type other than float / half or more than one.
        TypeError: mixed dtypes; non-float ones
            when the session lowers it (PopART makes the op with any dtype).
    """
    _check_conv("conv", t, weight, groups)
    attrs = conv_attrs("conv", t, weight, stride, padding, dilation, groups, pad_type)
    (out,) = create_op(
        "Conv", [t, weight], {**attrs, **conv_partials("conv", partials_types, t, weight)}
    )
    return out


def conv_partials(what: str, partials_types: Any, t: Tensor, weight: Tensor) -> dict[str, Any]:
    """``{"partials_type": dtype}`` of a convolution (PopART's ``MultiConvOptions``: the
    op's one ``partials_types`` entry, else the session's ``convolutionOptions``), or
    ``{}`` where neither sets it (PopLin's default, float)."""
    if partials_types is None or (not isinstance(partials_types, str) and not len(partials_types)):
        from tremula.popxl._ir.ir import session_options
        from tremula.popxl.context import get_current_graph

        options = session_options(get_current_graph().ir).convolutionOptions or {}
        value = options.get("partialsType")
        if not value:
            return {}
    elif isinstance(partials_types, str) or len(partials_types) != 1:
        raise ValueError(
            f"{what}: partials_types {partials_types!r} must list one partials type, for "
            f"the one convolution of {t.id!r} and {weight.id!r}"
        )
    else:
        value = partials_types[0]
    return {"partials_type": partials_of(value, what, t, weight)}


def conv_attrs(what: str, t: Tensor, weight: Tensor, stride, padding, dilation, groups,
               pad_type) -> dict[str, Any]:  # fmt: skip
    """The attributes of a ``Conv`` (shapes checked, types not)."""
    if weight.shape[1] * groups != t.shape[1] or weight.shape[0] % groups:
        raise OpSetupError(  # PopART's ConvOp::setup
            f"{what}: weight {weight.id!r} {weight.shape} does not fit {t.shape[1]} input "
            f"channels in {groups} group(s)"
        )
    attrs = _geometry(what, t, weight.shape[2:], stride, padding, dilation, pad_type)
    return {**attrs, "groups": int(groups)}


def _conv_transpose_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    t, w = x[0].astype(np.float64), x[1].astype(np.float64)
    n, c = t.shape[:2]
    g, oc = a["groups"], a["out_channels"]
    full = [(s - 1) * st + (k - 1) * d + 1 + op for s, st, k, d, op in zip(
        t.shape[2:], a["stride"], a["kernel"], a["dilation"], a["output_padding"])]  # fmt: skip
    out = np.zeros((n, oc, *full))
    wg = w.reshape(g, c // g, oc // g, *a["kernel"])
    tg = t.reshape(n, g, c // g, *t.shape[2:])
    for k in itertools.product(*[range(kk) for kk in a["kernel"]]):
        contrib = np.einsum("ngc...,gco->ngo...", tg, wg[(slice(None),) * 3 + k])
        key = tuple(slice(ki * d, ki * d + st * (s - 1) + 1, st) for ki, d, st, s in zip(
            k, a["dilation"], a["stride"], t.shape[2:]))  # fmt: skip
        out[_channels_and(key)] += contrib.reshape(n, oc, *t.shape[2:])
    crop = tuple(slice(b, f - e) for b, e, f in zip(a["pads_begin"], a["pads_end"], full))
    return [out[_channels_and(crop)].astype(x[0].dtype)]


defop(
    "ConvTranspose",
    lambda specs, a: [
        TensorSpec((specs[0].shape[0], a["out_channels"], *a["out"]), specs[0].dtype)
    ],
    _conv_transpose_ref,
    float_inputs=(0, 1),
)


def conv_transpose(
    t: Tensor,
    weight: Tensor,
    stride: Sequence[int] = (1, 1),
    padding: Sequence[int] = (0, 0, 0, 0),
    dilation: Sequence[int] = (1, 1),
    groups: int = 1,
    pad_type: PadType | str = "not_set",
    output_padding: Sequence[int] = (),
    output_shape: Sequence[int] = (),
    available_memory_proportions: Any = None,
    partials_types: Any = None,
    enable_conv_dithering: Any = None,
) -> Tensor:
    """N-d transposed convolution (ONNX ConvTranspose): ``weight`` is
    ``[C, C_out / groups, *kernel]``; the output's spatial size is
    ``stride (in - 1) + output_padding + dilation (kernel - 1) + 1 - pads``.

    Padding is ``padding``, or derived (ONNX's rule) from ``output_shape`` (one entry per
    spatial axis, or the whole output shape) or from ``pad_type`` ``"same_upper"`` /
    ``"same_lower"`` (output ``in * stride``): the total padding is split evenly, the odd
    element at the end for ``same_upper`` and at the start otherwise; ``"valid"`` pads
    nothing.
    ``partials_types`` as :func:`conv`'s.

    Raises:
        ValueError: as :func:`conv`, an unknown ``pad_type``, an ``output_shape`` of the
            wrong length or larger than the unpadded output.
        popart.popart_exception: weight channels not matching ``t`` (also a
            ``ValueError``), ``output_shape`` with ``pad_type="valid"``, a dilation other
            than 1 (PopART's "Non default value for dilations is not supported.").
    """
    _check_conv("conv_transpose", t, weight, groups)
    attrs = conv_transpose_attrs("conv_transpose", t, weight, stride, padding, dilation, groups,
                                 pad_type, output_padding, output_shape)  # fmt: skip
    attrs.update(conv_partials("conv_transpose", partials_types, t, weight))
    (res,) = create_op("ConvTranspose", [t, weight], attrs)
    return res


def _transpose_pads(
    what: str,
    t: Tensor,
    full: list[int],
    mode: PadType,
    padding: Any,
    output_shape: Sequence[int],
    stride: tuple[int, ...],
) -> tuple[int, ...]:
    """The pads (begin..., end...) of a ConvTranspose whose unpadded output is ``full``."""
    n = len(full)
    target: Sequence[int] | None = None
    if len(output_shape):
        shape = tuple(int(v) for v in output_shape)
        if len(shape) not in (n, n + 2):
            raise ValueError(
                f"{what}: output_shape {shape} must have {n} (spatial) or {n + 2} entries"
            )
        if mode is PadType.VALID:
            raise OpSetupError(f"{what}: output_shape {shape} cannot be used with pad_type 'valid'")
        target = shape[-n:]
    elif mode in (PadType.SAME_UPPER, PadType.SAME_LOWER):
        target = [s * st for s, st in zip(t.shape[2:], stride)]
    elif mode is PadType.VALID:
        return (0,) * (2 * n)
    else:
        return _ints(padding, 2 * n, 0, what, "padding")
    total = [f - o for f, o in zip(full, target)]
    if min(total) < 0:
        raise ValueError(
            f"{what}: output shape {tuple(target)} is larger than the unpadded output "
            f"{tuple(full)} of {t.id!r}; use output_padding"
        )
    small, big = [p // 2 for p in total], [p - p // 2 for p in total]
    return tuple(small + big) if mode is PadType.SAME_UPPER else tuple(big + small)


def conv_transpose_attrs(what: str, t: Tensor, weight: Tensor, stride, padding, dilation, groups,
                         pad_type, output_padding, output_shape) -> dict[str, Any]:  # fmt: skip
    """The attributes of a ``ConvTranspose`` (shapes checked, types not)."""
    n = t.rank - 2
    if weight.shape[0] != t.shape[1]:
        raise OpSetupError(
            f"{what}: weight {weight.id!r} {weight.shape} must have {t.shape[1]} "
            f"input channels first"
        )
    mode = pad_mode(pad_type)
    kernel = weight.shape[2:]
    stride = _ints(stride, n, 1, what, "stride")
    dilation = _ints(dilation, n, 1, what, "dilation")
    if any(d != 1 for d in dilation):  # PopART's ConvTransposeOp refuses them at setup
        raise OpSetupError(
            f"Non default value for dilations is not supported. ({what}: dilation {dilation} "
            f"of {t.id!r}; PopART's ConvTranspose takes dilations of 1 only)"
        )
    out_pad = _ints(output_padding, n, 0, what, "output_padding")
    full = [
        st * (s - 1) + op + d * (k - 1) + 1
        for s, st, op, d, k in zip(t.shape[2:], stride, out_pad, dilation, kernel)
    ]
    pads = _transpose_pads(what, t, full, mode, padding, output_shape or (), stride)
    out = [f - b - e for f, b, e in zip(full, pads[:n], pads[n:])]
    if min(out) < 1 or min(pads + out_pad) < 0:
        raise ValueError(f"{what}: output spatial shape {out} (padding {pads}) is empty")
    return {
        "kernel": tuple(kernel), "stride": stride, "dilation": dilation, "pads_begin": pads[:n],
        "pads_end": pads[n:], "output_padding": out_pad, "out": tuple(out), "groups": int(groups),
        "out_channels": weight.shape[1] * int(groups),
    }  # fmt: skip


# ---- pooling ----


def _pool_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    v = x[0].astype(np.float64)
    if a["mode"] == "max":
        return [patches_np(v, a, -np.inf).max(axis=2).astype(x[0].dtype)]
    total = patches_np(v, a, 0.0).sum(axis=2)
    count = patches_np(np.ones((1, 1, *v.shape[2:])), a, 0.0).sum(axis=2)
    return [(total / count).astype(x[0].dtype)]


#: PopART's two pooling ops (``MaxPoolOp``, ``AveragePoolOp``), by ``mode`` attribute
POOL_TYPES = {"max": "MaxPool", "average": "AveragePool"}
for _pool_type in POOL_TYPES.values():
    defop(
        _pool_type,
        lambda specs, a: [TensorSpec((*specs[0].shape[:2], *a["out"]), specs[0].dtype)],
        _pool_ref,
        float_inputs=(0,),
    )


def _pool(mode: str, t: Tensor, kernel_size: Sequence[int], stride, padding, out_pads, dilation,
          in_dilations, auto_pad, ceil_mode) -> Tensor:  # fmt: skip
    what = f"{mode}_pool" if mode == "max" else "average_pool"
    check_tensor(t, what)
    if t.rank < 3:
        raise ValueError(f"{what}: {t.id!r} {t.shape} must be [N, C, *spatial]")
    n = t.rank - 2
    kernel = _ints(kernel_size, n, 1, what, "kernel_size")
    if any(v != 1 for v in _ints(in_dilations, n, 1, what, "in_dilations")) or any(
        v != 0 for v in _ints(out_pads, 2 * n, 0, what, "out_pads")
    ):
        raise ValueError(f"{what}: in_dilations and out_pads are not supported")
    attrs = _geometry(what, t, kernel, stride, padding, dilation, auto_pad, bool(ceil_mode))
    (out,) = create_op(POOL_TYPES[mode], [t], {**attrs, "mode": mode})
    return out


def average_pool(
    t: Tensor,
    kernel_size: Sequence[int],
    stride: Sequence[int] | None = None,
    padding: Sequence[int] | None = None,
    out_pads: Sequence[int] | None = None,
    dilation: Sequence[int] | None = None,
    in_dilations: Sequence[int] | None = None,
    auto_pad: PadType | str = "not_set",
    ceil_mode: bool = False,
) -> Tensor:
    """The mean of each window of ``t`` ``[N, C, *spatial]`` (padding not counted).

    Raises:
        ValueError: a window that does not fit; ``in_dilations`` / ``out_pads`` other than
            the defaults.
    """
    return _pool("average", t, kernel_size, stride, padding, out_pads, dilation, in_dilations,
                 auto_pad, ceil_mode)  # fmt: skip


def max_pool(
    t: Tensor,
    kernel_size: Sequence[int],
    stride: Sequence[int] | None = None,
    padding: Sequence[int] | None = None,
    out_pads: Sequence[int] | None = None,
    dilation: Sequence[int] | None = None,
    in_dilations: Sequence[int] | None = None,
    auto_pad: PadType | str = "not_set",
    ceil_mode: bool = False,
    storage_order: str = "row",
) -> Tensor:
    """The maximum of each window of ``t`` ``[N, C, *spatial]`` (padding is ``-inf``)."""
    return _pool("max", t, kernel_size, stride, padding, out_pads, dilation, in_dilations,
                 auto_pad, ceil_mode)  # fmt: skip


__all__ = ["PadType", "average_pool", "conv", "conv_transpose", "max_pool"]
