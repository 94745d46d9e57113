"""Convolutions and pooling (popxl/ops/conv.py) through a Session against naive NumPy
loops."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from tremula_tests_evaluator import check, run

import popxl.ops as ops
from tremula.errors import PopartException

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


def _partials_vertices(partials_types=None, option=None, grads: bool = False) -> set[str]:
    """The partials types of the block-product vertices (``poplin::AmpPartial`` /
    ``MacPartial<IN,P,...>``) a float16
    convolution lowers to (with its gradients: the weights' and the input's), and checks
    its values against the naive loops."""
    import popxl

    x = RNG.normal(size=(2, 8, 5, 5)).astype(np.float16)
    w = RNG.normal(size=(4, 8, 3, 3)).astype(np.float16)
    ir = popxl.Ir()
    if option:
        from tremula.popxl._ir.ir import session_options

        session_options(ir).convolutionOptions = {"partialsType": option}
    with ir.main_graph:
        xt, wt = popxl.variable(x, name="x"), popxl.variable(w, name="w")
        g = ir.create_graph(lambda a, b: ops.conv(a, b, partials_types=partials_types), xt, wt)
        info = ops.call_with_info(g, xt, wt)
        y = info.outputs[0]
        if grads:
            grad = popxl.transforms.autodiff(g)
            seed = popxl.constant(np.ones(y.shape, np.float16))
            ops.call(grad.graph, seed, inputs_dict=grad.inputs_dict(info))
        stream = popxl.d2h_stream(y.shape, y.dtype)
        ops.host_store(stream, y)
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()[stream]
        names = session.engine.get_graph_profile()["vertexTypes"]["names"]
    want = naive_conv(x, w, (1, 1), (0, 0, 0, 0), (1, 1), 1)
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=3e-2)
    products = [n for n in names if n.startswith(("poplin::AmpPartial", "poplin::MacPartial"))]
    assert products
    return {n.split("<")[1].split(",")[1] for n in products}  # <IN,P,GxMxKxN>


@pytest.mark.parametrize(
    "partials_types, option, want",
    [(None, None, "float"), (["half"], None, "half"), (["float"], "half", "float"),
     ([], "half", "half")],
)  # fmt: skip
def test_conv_partials_type_reaches_poplin(partials_types, option, want):
    """``partials_types`` (PopXL's per-convolution list) or else the session option
    ``convolutionOptions["partialsType"]`` sets the partials of a float16 convolution's
    PopLin vertices (it used to be ignored: always float); PopLin's default is float."""
    assert _partials_vertices(partials_types, option) == {want}


def test_conv_gradients_take_the_forward_partials_type():
    """The gradient convolutions (weights and input) keep the forward's partials type."""
    assert _partials_vertices(["half"], grads=True) == {"half"}


@pytest.mark.parametrize("partials_types", [["half", "half"], ["double"], "half"])
def test_conv_partials_types_errors(partials_types):
    import popxl

    with popxl.Ir().main_graph:
        x = popxl.variable(np.ones((1, 2, 3, 3), np.float16))
        w = popxl.variable(np.ones((2, 2, 1, 1), np.float16))
        with pytest.raises(ValueError, match="partials_type"):
            ops.conv(x, w, partials_types=partials_types)


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


def onnx_transpose_pads(in_hw, k, stride, out_pad, target, upper):
    """ONNX ConvTranspose: total padding = s (in - 1) + out_pad + k - target, split with
    the odd element at the end (SAME_UPPER) or the start (otherwise)."""
    total = [
        s * (i - 1) + op + kk - o for i, kk, s, op, o in zip(in_hw, k, stride, out_pad, target)
    ]
    half = [p // 2 for p in total]
    rest = [p - p // 2 for p in total]
    begin, end = (half, rest) if upper else (rest, half)
    return (begin[0], begin[1], end[0], end[1])


@pytest.mark.parametrize(
    "kwargs, target, upper",
    [
        ({"output_shape": (6, 7)}, (6, 7), False),  # one entry per spatial axis
        ({"output_shape": (2, 3, 5, 8)}, (5, 8), False),  # the whole output shape
        ({"output_shape": (6, 5), "pad_type": "same_upper"}, (6, 5), True),
        ({"pad_type": "same_upper"}, (6, 8), True),  # in * stride
        ({"pad_type": "same_lower"}, (6, 8), False),
        ({"pad_type": "valid"}, None, False),
    ],
)
def test_conv_transpose_output_shape_and_auto_padding(kwargs, target, upper):
    x = RNG.normal(size=(2, 4, 3, 4)).astype(np.float32)
    w = RNG.normal(size=(4, 3, 3, 2)).astype(np.float32)
    stride = (2, 2)  # unpadded output (7, 8)
    if target is None:
        pads = (0, 0, 0, 0)
    else:
        pads = onnx_transpose_pads((3, 4), (3, 2), stride, (0, 0), target, upper)
    want = naive_conv_transpose(x, w, stride, pads, (0, 0), 1)
    if target is not None:
        assert want.shape[2:] == target
    check(lambda a, b: ops.conv_transpose(a, b, stride, **kwargs), want, x, w, rtol=1e-4,
          atol=1e-5)  # fmt: skip


def test_conv_transpose_errors():
    x = np.zeros((1, 4, 3, 3), np.float32)
    w = np.zeros((4, 2, 2, 2), np.float32)
    with pytest.raises(PopartException, match=r"output_shape .* cannot be used with pad_type"):
        run(lambda a, b: ops.conv_transpose(a, b, output_shape=(4, 4), pad_type="valid"), x, w)
    with pytest.raises(ValueError, match="pad_type 'same' is not valid"):
        run(lambda a, b: ops.conv_transpose(a, b, pad_type="same"), x, w)
    with pytest.raises(ValueError, match=r"output_shape \(4, 4, 4\) must have 2"):
        run(lambda a, b: ops.conv_transpose(a, b, output_shape=(4, 4, 4)), x, w)
    with pytest.raises(ValueError, match=r"output shape \(9, 4\) is larger"):
        run(lambda a, b: ops.conv_transpose(a, b, output_shape=(9, 4)), x, w)
    w3 = np.zeros((3, 2, 2, 2), np.float32)
    with pytest.raises(PopartException, match="must have 4 input channels first"):
        run(lambda a, b: ops.conv_transpose(a, b), x, w3)


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


def naive_resize_axis(x, n_out, mode, coord, axis, nearest="round_prefer_floor"):
    """ONNX Resize along one axis by per-output loops (ONNX's reference: edge values stand
    in for positions outside the input; cubic with a = -0.75)."""
    n_in = x.shape[axis]
    scale = n_out / n_in
    outs = []

    def at(k):
        return np.take(x, min(max(k, 0), n_in - 1), axis=axis)

    for j in range(n_out):
        if coord in ("align_corners", "tf_crop_and_resize"):
            c = j * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
            c = 0.5 * (n_in - 1) if n_out == 1 and coord == "tf_crop_and_resize" else c
        elif coord == "asymmetric":
            c = j / scale
        elif coord == "pytorch_half_pixel" and n_out == 1:
            c = 0.0
        else:
            c = (j + 0.5) / scale - 0.5
        if mode == "nearest":
            k = {
                "round_prefer_floor": np.ceil(c - 0.5),
                "round_prefer_ceil": np.floor(c + 0.5),
                "floor": np.floor(c),
                "ceil": np.ceil(c),
            }[nearest]
            outs.append(at(int(k)))
        elif mode == "linear":
            c = min(max(c, 0.0), n_in - 1)
            k0 = int(np.floor(c))
            f = c - k0
            outs.append((1 - f) * at(k0) + f * at(k0 + 1))
        else:
            k0 = int(np.floor(c))
            f = c - k0
            a = -0.75
            # Keys: weights of k0-1 .. k0+2 at distances 1+f, f, 1-f, 2-f
            w = [
                a * (1 + f) ** 3 - 5 * a * (1 + f) ** 2 + 8 * a * (1 + f) - 4 * a,
                (a + 2) * f**3 - (a + 3) * f**2 + 1,
                (a + 2) * (1 - f) ** 3 - (a + 3) * (1 - f) ** 2 + 1,
                a * (2 - f) ** 3 - 5 * a * (2 - f) ** 2 + 8 * a * (2 - f) - 4 * a,
            ]
            outs.append(sum(wi * at(k0 - 1 + i) for i, wi in enumerate(w)))
    return np.stack(outs, axis=axis)


COORDS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize"]


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("coord", COORDS)
def test_interpolate(mode, coord):
    x = RNG.normal(size=(1, 2, 3, 4)).astype(np.float32)
    want = naive_resize_axis(
        naive_resize_axis(x.astype(np.float64), 6, mode, coord, 2), 6, mode, coord, 3
    )

    def build(t):  # PopXL's positional order: t, scale_factor, mode, nearest_mode, coords
        return ops.interpolate(t, (1.0, 1.0, 2.0, 1.5), mode, "round_prefer_floor", coord)

    check(build, want, x, rtol=1e-5, atol=1e-6)
    want = naive_resize_axis(x.astype(np.float64), 2, mode, coord, 3)
    check(lambda t: ops.interpolate(t, output_size=(1, 2, 3, 2), mode=mode,
                                    coordinate_transformation_mode=coord), want, x,
          rtol=1e-5, atol=1e-6)  # fmt: skip


@pytest.mark.parametrize("nearest", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
def test_interpolate_nearest_modes(nearest):
    x = RNG.normal(size=(2, 5)).astype(np.float32)
    want = naive_resize_axis(x.astype(np.float64), 7, "nearest", "half_pixel", 1, nearest)
    want = naive_resize_axis(want, 3, "nearest", "half_pixel", 0, nearest)
    check(lambda t: ops.interpolate(t, (1.5, 1.4), "nearest", nearest), want, x)


def test_interpolate_nearest_of_integers():
    x = np.arange(12, dtype=np.int32).reshape(1, 1, 3, 4)
    want = naive_resize_axis(naive_resize_axis(x, 6, "nearest", "half_pixel", 2), 2, "nearest",
                             "half_pixel", 3)  # fmt: skip
    got = check(lambda t: ops.interpolate(t, (1, 1, 2, 0.5)), want, x)
    assert got[0].dtype == np.int32
    with pytest.raises(TypeError):
        run(lambda t: ops.interpolate(t, (1, 1, 2, 2), "linear"), x)


def test_interpolate_errors():
    x = np.zeros((1, 1, 2, 2), np.float32)
    with pytest.raises(ValueError, match="interpolate type bicubic is not valid for mode"):
        run(lambda t: ops.interpolate(t, mode="bicubic"), x)
    with pytest.raises(ValueError, match="interpolate type tf_half_pixel_for_nn is not valid"):
        run(lambda t: ops.interpolate(t, coordinate_transformation_mode="tf_half_pixel_for_nn"), x)
    with pytest.raises(PopartException, match="one positive entry per axis"):
        run(lambda t: ops.interpolate(t, (2.0, 2.0)), x)
