"""``roi_align``: bilinear samples of regions of interest, averaged per output bin (PopART's
RoiAlign, average mode).

The rule is the one of Detectron's and torchvision's ``roi_align``. Along each spatial axis,
a roi ``[start, end)`` (scaled by ``spatial_scale``) is cut into ``bins`` equal bins and
each bin is sampled ``sampling_ratio`` times at ``start + (bin + (i + 0.5) / ratio) *
length / bins``. A sample outside ``[-1, size]`` counts as 0. A sample inside is clamped
to ``[0, size - 1]`` and blends its two neighbours linearly. An output element is the mean
of the ``ratio x ratio`` bilinear samples of its bin.

``aligned=False`` (PopART's rule) uses the coordinates as given and makes a roi at least one
pixel long. ``aligned=True`` shifts them by -0.5 (pixel centres) and keeps the lengths as
they are.

:func:`sample_plan` turns this into two arrays: each sample's four corner pixels as flat
indices into the input viewed as ``[N * H * W, C]``, and their weights. The forward pass
gathers those rows and sums them with the weights. ``RoiAlignGrad``, the transposed op that
the gradient rule builds, adds the weighted output gradients back into those rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tremula.popxl.ops.base import create_op, defop
from tremula.popxl.ops.gather import INDEX_TYPES
from tremula.popxl.ops.shape import check_tensor
from tremula.popxl.tensor import Tensor, TensorSpec


def sample_steps(bins: int, ratio: int) -> np.ndarray:
    """``[bins * ratio]``: where each sample sits along a roi, in bins (``bin + (i + 0.5) /
    ratio``). The lowering makes the same array a constant."""
    b, i = np.divmod(np.arange(bins * ratio), ratio)
    return b + (i + 0.5) / ratio


def _axis_samples(
    start: np.ndarray, end: np.ndarray, size: int, bins: int, a: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Along one spatial axis, for rois from ``start`` to ``end`` (``[K]`` each): ``(lo, hi,
    w_lo, w_hi)``, each ``[K, bins * ratio]``. These are every sample's two neighbours (-1 for
    a sample outside ``[-1, size]``) and their weights (0 there)."""
    shift = 0.5 if a["aligned"] else 0.0
    s = start * a["spatial_scale"] - shift
    length = (end * a["spatial_scale"] - shift) - s
    if not a["aligned"]:
        length = np.maximum(length, 1.0)
    steps = sample_steps(bins, a["sampling_ratio"]).astype(start.dtype)
    c = s[:, None] + steps[None, :] * (length / bins)[:, None]
    valid = (c >= -1.0) & (c <= size)
    c = np.maximum(c, 0.0)
    low = np.floor(c)
    frac = np.where(low >= size - 1, 0.0, c - low)
    lo = np.where(valid, np.minimum(low, size - 1), -1).astype(np.int64)
    hi = np.where(valid, np.minimum(low + 1, size - 1), -1).astype(np.int64)
    return lo, hi, np.where(valid, 1.0 - frac, 0.0), np.where(valid, frac, 0.0)


def sample_plan(
    rois: np.ndarray, batch_index: np.ndarray, in_shape: tuple[int, ...], a: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, weights)``, each ``[K, out_h, ratio, out_w, ratio, 2, 2]``. ``rows`` is the
    input pixel (a flat index into ``[N * H * W]``) that each sample's corner reads, and -1
    where the sample lies outside the image or ``batch_index`` is out of range. ``weights``
    is the bilinear weight of the corner divided by the bin's sample count."""
    n, _, h, w = in_shape
    (oh, ow), g = a["output_size"], a["sampling_ratio"]
    k = rois.shape[0]
    r = rois.astype(np.result_type(rois.dtype, np.float32))
    ylo, yhi, wylo, wyhi = _axis_samples(r[:, 1], r[:, 3], h, oh, a)
    xlo, xhi, wxlo, wxhi = _axis_samples(r[:, 0], r[:, 2], w, ow, a)
    y = np.stack([ylo, yhi], -1).reshape(k, oh, g, 1, 1, 2, 1)
    x = np.stack([xlo, xhi], -1).reshape(k, 1, 1, ow, g, 1, 2)
    wy = np.stack([wylo, wyhi], -1).reshape(k, oh, g, 1, 1, 2, 1)
    wx = np.stack([wxlo, wxhi], -1).reshape(k, 1, 1, ow, g, 1, 2)
    b = batch_index.astype(np.int64).reshape(k, 1, 1, 1, 1, 1, 1)
    ok = (y >= 0) & (x >= 0) & (b >= 0) & (b < n)
    rows = np.where(ok, (b * h + y) * w + x, -1)
    return rows, wy * wx * (1.0 / (g * g))


# ---- the op and its transpose ----


def _roi_spec(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    t, rois = specs[0], specs[1]
    return [TensorSpec((rois.shape[0], t.shape[1], *a["output_size"]), t.dtype)]


def _roi_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    t, rois, bidx = x
    n, c, h, w = t.shape
    rows, weights = sample_plan(rois, bidx, t.shape, a)
    table = t.transpose(0, 2, 3, 1).reshape(n * h * w, c).astype(np.result_type(t, np.float32))
    picked = np.where(rows[..., None] >= 0, table[np.maximum(rows, 0)], 0.0)
    out = np.sum(picked * weights[..., None], axis=(2, 4, 5, 6))  # [K, out_h, out_w, C]
    return [out.transpose(0, 3, 1, 2).astype(t.dtype)]


def _roi_grad_spec(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    return [TensorSpec(a["input_shape"], specs[0].dtype)]


def _roi_grad_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    g, rois, bidx = x
    n, c, h, w = a["input_shape"]
    rows, weights = sample_plan(rois, bidx, a["input_shape"], a)
    k, oh, ow = g.shape[0], g.shape[2], g.shape[3]
    gv = g.transpose(0, 2, 3, 1).astype(np.result_type(g, np.float32))
    values = gv.reshape(k, oh, 1, ow, 1, 1, 1, c) * weights[..., None]
    table = np.zeros((n * h * w, c), values.dtype)
    ok = rows >= 0
    np.add.at(table, rows[ok], values[ok])
    return [table.reshape(n, h, w, c).transpose(0, 3, 1, 2).astype(g.dtype)]


defop("RoiAlign", _roi_spec, _roi_ref, float_inputs=(0, 1))
#: the transpose of RoiAlign in its first input (the gradient rule's op): the output
#: gradient ``[K, C, out_h, out_w]`` added back into an input of ``attrs["input_shape"]``
defop("RoiAlignGrad", _roi_grad_spec, _roi_grad_ref)


def _positive_int(value: Any, what: str, arg: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{what}: {arg} must be a positive integer, got {value!r}")
    return int(value)


def _check_args(
    t: Tensor,
    rois: Tensor,
    batch_index: Tensor,
    output_size: Any,
    spatial_scale: Any,
    sampling_ratio: Any,
) -> dict[str, Any]:
    what = "roi_align"
    check_tensor(t, what)
    check_tensor(rois, what, "rois")
    check_tensor(batch_index, what, "batch_index")
    if t.rank != 4:
        raise ValueError(f"{what}: t {t.id!r} must be [N, C, H, W], got shape {t.shape}")
    if rois.rank != 2 or rois.shape[1] != 4:
        raise ValueError(
            f"{what}: rois {rois.id!r} must be [num_rois, 4] of (x1, y1, x2, y2), got shape "
            f"{rois.shape}"
        )
    if batch_index.dtype not in INDEX_TYPES:
        raise TypeError(
            f"{what}: batch_index {batch_index.id!r} must be int32 or uint32, got "
            f"{batch_index.dtype}"
        )
    if batch_index.shape != (rois.shape[0],):
        raise ValueError(
            f"{what}: batch_index {batch_index.id!r} must be [{rois.shape[0]}] (one per roi "
            f"of {rois.id!r}), got shape {batch_index.shape}"
        )
    pair = tuple(output_size) if isinstance(output_size, (Sequence, np.ndarray)) else ()
    if len(pair) != 2:
        raise ValueError(
            f"{what}: output_size must be (out_h, out_w), two positive integers, got "
            f"{output_size!r}"
        )
    size = tuple(_positive_int(s, what, "output_size") for s in pair)
    if isinstance(spatial_scale, bool) or not isinstance(spatial_scale, (int, float, np.number)):
        raise ValueError(f"{what}: spatial_scale must be a number, got {spatial_scale!r}")
    if not (math.isfinite(spatial_scale) and spatial_scale > 0):
        raise ValueError(f"{what}: spatial_scale must be finite and positive, got {spatial_scale}")
    if isinstance(sampling_ratio, (int, np.integer)) and sampling_ratio == 0:
        raise ValueError(
            f"{what}: sampling_ratio 0 (adaptive: ceil(roi size / output size) samples per "
            f"bin) is not supported, since the sample count would depend on the rois' values "
            f"at run time; give a positive number of samples per bin"
        )
    ratio = _positive_int(sampling_ratio, what, "sampling_ratio")
    return {"output_size": size, "spatial_scale": float(spatial_scale), "sampling_ratio": ratio}


def roi_align(
    t: Tensor,
    rois: Tensor,
    batch_index: Tensor,
    output_size: tuple[int, int],
    spatial_scale: float,
    sampling_ratio: int,
    aligned: bool = False,
) -> Tensor:
    """Average-pool bilinear samples of each region of interest (PopART's RoiAlign).

    Output bin ``(i, j)`` of roi ``k`` is the mean of ``sampling_ratio x sampling_ratio``
    bilinear samples of ``t[batch_index[k]]``, taken on a regular grid inside the bin (see the
    module docstring for the exact coordinates).

    Convention: by default this uses PopART's rule, which is Detectron's and torchvision's
    ``roi_align(..., aligned=False)``. Roi coordinates are scaled by ``spatial_scale``
    without a half-pixel shift, and a roi is made at least one pixel long on each axis.
    ``aligned`` is a Tremula extension that PopXL's signature lacks. ``aligned=True``
    gives torchvision's half-pixel form: coordinates shifted by -0.5 and no minimum size.
    This is not ONNX RoiAlign's default (ONNX uses ``half_pixel`` from opset 16).

    Samples outside ``[-1, H] x [-1, W]`` count as 0. So do rois whose ``batch_index`` is not
    in ``[0, N)``.

    Args:
        t: ``[N, C, H, W]`` float16 / float32 feature map.
        rois: ``[K, 4]`` float boxes ``(x1, y1, x2, y2)`` in the input image's coordinates.
        batch_index: ``[K]`` int32 (or uint32): the image in ``t`` of each roi.
        output_size: ``(out_h, out_w)``.
        spatial_scale: factor from image coordinates to ``t``'s pixels (e.g. 1/16).
        sampling_ratio: samples per bin along each axis, at least 1. ONNX's adaptive 0 is
            refused, because the sample count would depend on the rois' values.
        aligned: ``False`` for PopART's rule (the default), ``True`` for half-pixel
            coordinates.

    Returns:
        ``[K, C, out_h, out_w]`` of ``t``'s dtype. Its gradient flows to ``t`` only. The
        rois and batch indices get none, as in PopART.

    Raises:
        TypeError: an argument that is not a Tensor, ``t`` or ``rois`` not float16 /
            float32, ``batch_index`` not int32 / uint32.
        ValueError: shapes other than ``[N, C, H, W]``, ``[K, 4]`` and ``[K]``, an
            ``output_size`` that is not two positive integers, a spatial scale that is not
            positive and finite, or a sampling ratio below 1.
    """
    attrs = _check_args(t, rois, batch_index, output_size, spatial_scale, sampling_ratio)
    attrs["aligned"] = bool(aligned)
    (out,) = create_op("RoiAlign", [t, rois, batch_index], attrs)
    return out


__all__ = ["roi_align"]
