"""Convolutions and pooling (popxl/ops/conv.py) through a Session against naive NumPy
loops."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import numpy as np
import pytest

import popxl.ops as ops

_spec = importlib.util.spec_from_file_location(
    "popxl_ops_helpers", Path(__file__).with_name("test_popxl_ops_helpers.py")
)
_helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_helpers)
check, run = _helpers.check, _helpers.run

RNG = np.random.default_rng(13)


def naive_conv(x, w, stride, pads, dilation, groups):
    """Direct loops over output positions (2-D)."""
    n = x.shape[0]
    oc, cg, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])])
    oh = (xp.shape[2] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (xp.shape[3] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, oc, oh, ow))
    per = oc // groups
    for o, i, j in itertools.product(range(oc), range(oh), range(ow)):
        g = o // per
        rows = slice(i * stride[0], i * stride[0] + dilation[0] * (kh - 1) + 1, dilation[0])
        cols = slice(j * stride[1], j * stride[1] + dilation[1] * (kw - 1) + 1, dilation[1])
        win = xp[:, g * cg : (g + 1) * cg, rows, cols]
        out[:, o, i, j] = np.sum(win * w[o], axis=(1, 2, 3))
    return out


@pytest.mark.parametrize(
    "stride,pads,dilation,groups",
    [
        ((1, 1), (0, 0, 0, 0), (1, 1), 1),
        ((2, 1), (1, 0, 1, 2), (1, 2), 2),
        ((1, 2), (1, 1, 1, 1), (2, 1), 4),
    ],
)
def test_conv2d(stride, pads, dilation, groups):
    x = RNG.normal(size=(2, 4, 7, 6)).astype(np.float32)
    w = RNG.normal(size=(4, 4 // groups, 3, 2)).astype(np.float32)
    want = naive_conv(x, w, stride, pads, dilation, groups)
    check(
        lambda a, b: ops.conv(a, b, stride, pads, dilation, groups),
        want,
        x,
        w,
        rtol=1e-4,
        atol=1e-5,
    )


def test_conv_same_padding_and_1d():
    x = RNG.normal(size=(1, 2, 5, 5)).astype(np.float32)
    w = RNG.normal(size=(3, 2, 3, 3)).astype(np.float32)
    want = naive_conv(x, w, (2, 2), (1, 1, 1, 1), (1, 1), 1)
    got = check(
        lambda a, b: ops.conv(a, b, (2, 2), pad_type="same_upper"), want, x, w, rtol=1e-4, atol=1e-5
    )
    assert got[0].shape == (1, 3, 3, 3)
    x1 = RNG.normal(size=(2, 3, 9)).astype(np.float32)
    w1 = RNG.normal(size=(2, 3, 4)).astype(np.float32)
    want = naive_conv(x1[..., None], w1[..., None], (2, 1), (0, 0, 0, 0), (1, 1), 1)[..., 0]
    check(lambda a, b: ops.conv(a, b, (2,), (0, 0), (1,)), want, x1, w1, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="does not fit"):
        run(lambda a, b: ops.conv(a, b, groups=2), x, w)


def naive_conv_transpose(x, w, stride, pads, out_pad, groups):
    n, c, h, wd = x.shape
    _, ocg, kh, kw = w.shape
    oc = ocg * groups
    full = np.zeros(
        (n, oc, (h - 1) * stride[0] + kh + out_pad[0], (wd - 1) * stride[1] + kw + out_pad[1])
    )
    cg = c // groups
    for b, ci, i, j in itertools.product(range(n), range(c), range(h), range(wd)):
        g = ci // cg
        rows = slice(i * stride[0], i * stride[0] + kh)
        cols = slice(j * stride[1], j * stride[1] + kw)
        full[b, g * ocg : (g + 1) * ocg, rows, cols] += x[b, ci, i, j] * w[ci]
    return full[:, :, pads[0] : full.shape[2] - pads[2], pads[1] : full.shape[3] - pads[3]]


@pytest.mark.parametrize(
    "stride,pads,out_pad,groups",
    [((1, 1), (0, 0, 0, 0), (0, 0), 1), ((2, 3), (1, 0, 0, 1), (1, 0), 2)],
)
def test_conv_transpose(stride, pads, out_pad, groups):
    x = RNG.normal(size=(2, 4, 3, 4)).astype(np.float32)
    w = RNG.normal(size=(4, 3, 3, 2)).astype(np.float32)
    want = naive_conv_transpose(x, w, stride, pads, out_pad, groups)

    def build(a, b):
        return ops.conv_transpose(a, b, stride, pads, groups=groups, output_padding=out_pad)

    check(build, want, x, w, rtol=1e-4, atol=1e-5)


def naive_pool(x, k, s, pads, mode):
    n, c = x.shape[:2]
    fill = -np.inf if mode == "max" else np.nan
    xp = np.pad(
        x.astype(np.float64),
        [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])],
        constant_values=fill,
    )
    oh, ow = (xp.shape[2] - k[0]) // s[0] + 1, (xp.shape[3] - k[1]) // s[1] + 1
    out = np.zeros((n, c, oh, ow))
    for i, j in itertools.product(range(oh), range(ow)):
        win = xp[:, :, i * s[0] : i * s[0] + k[0], j * s[1] : j * s[1] + k[1]]
        out[:, :, i, j] = win.max(axis=(2, 3)) if mode == "max" else np.nanmean(win, axis=(2, 3))
    return out


@pytest.mark.parametrize("mode", ["max", "average"])
@pytest.mark.parametrize("pads", [(0, 0, 0, 0), (1, 1, 0, 1)])
def test_pools(mode, pads):
    x = RNG.normal(size=(2, 3, 6, 5)).astype(np.float32)
    fn = ops.max_pool if mode == "max" else ops.average_pool
    want = naive_pool(x, (3, 2), (2, 1), pads, mode)
    check(lambda a: fn(a, (3, 2), (2, 1), pads), want, x, rtol=1e-5)


def test_pool_ceil_mode_and_errors():
    x = RNG.normal(size=(1, 1, 5, 5)).astype(np.float32)
    padded = np.pad(x, [(0, 0), (0, 0), (0, 1), (0, 1)], constant_values=-np.inf)
    want = naive_pool(padded, (2, 2), (2, 2), (0,) * 4, "max")
    got = check(lambda a: ops.max_pool(a, (2, 2), (2, 2), ceil_mode=True), want, x)
    assert got[0].shape == (1, 1, 3, 3)
    with pytest.raises(ValueError, match="not supported"):
        run(lambda a: ops.average_pool(a, (2, 2), in_dilations=(2, 2)), x)


def naive_resize_axis(x, n_out, mode, coord, axis):
    """ONNX Resize along one axis by per-output loops."""
    n_in = x.shape[axis]
    scale = n_out / n_in
    outs = []
    for j in range(n_out):
        if coord == "align_corners":
            c = j * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        elif coord == "asymmetric":
            c = j / scale
        else:
            c = (j + 0.5) / scale - 0.5
        if mode == "nearest":  # round_prefer_floor
            k = min(max(int(np.ceil(c - 0.5)), 0), n_in - 1)
            outs.append(np.take(x, k, axis=axis))
        else:
            c = min(max(c, 0.0), n_in - 1)
            k0 = int(np.floor(c))
            k1 = min(k0 + 1, n_in - 1)
            f = c - k0
            outs.append((1 - f) * np.take(x, k0, axis=axis) + f * np.take(x, k1, axis=axis))
    return np.stack(outs, axis=axis)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("coord", ["half_pixel", "align_corners", "asymmetric"])
def test_interpolate(mode, coord):
    x = RNG.normal(size=(1, 2, 3, 4)).astype(np.float32)
    want = naive_resize_axis(
        naive_resize_axis(x.astype(np.float64), 6, mode, coord, 2), 6, mode, coord, 3
    )

    def build(t):
        return ops.interpolate(
            t, (1.0, 1.0, 2.0, 1.5), mode=mode, coordinate_transformation_mode=coord
        )

    check(build, want, x, rtol=1e-5)
    want = naive_resize_axis(x.astype(np.float64), 2, mode, coord, 3)
    check(lambda t: ops.interpolate(t, output_size=(1, 2, 3, 2), mode=mode,
                                    coordinate_transformation_mode=coord), want, x)  # fmt: skip


def test_interpolate_errors():
    x = np.zeros((1, 1, 2, 2), np.float32)
    with pytest.raises(NotImplementedError, match="cubic"):
        run(lambda t: ops.interpolate(t, mode="cubic"), x)
    with pytest.raises(ValueError, match="one positive entry per axis"):
        run(lambda t: ops.interpolate(t, (2.0, 2.0)), x)
