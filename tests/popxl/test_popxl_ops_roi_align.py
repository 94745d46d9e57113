"""``roi_align`` (popxl/ops/roi_align.py) through a Session: values and gradients against a
plain loop written from the Detectron / torchvision rule (independent of the op's vectorised
reference), hand-computed values, and refused arguments."""

from __future__ import annotations

import numpy as np
import pytest
from tremula_tests_evaluator import check

import popxl
import popxl.ops as ops

RNG = np.random.default_rng(23)
DEVICES = ["cpu", "ipu_model"]


# ---- the loop oracle: one roi, one bin, one sample at a time ----


def _taps(h, w, y, x):
    """The (row, column, weight) pixels one bilinear sample at (y, x) reads."""
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return []
    y, x = max(y, 0.0), max(x, 0.0)
    y0, x0 = int(y), int(x)
    if y0 >= h - 1:
        y0 = y1 = h - 1
        y = float(y0)
    else:
        y1 = y0 + 1
    if x0 >= w - 1:
        x0 = x1 = w - 1
        x = float(x0)
    else:
        x1 = x0 + 1
    ly, lx = y - y0, x - x0
    return [
        (y0, x0, (1 - ly) * (1 - lx)),
        (y0, x1, (1 - ly) * lx),
        (y1, x0, ly * (1 - lx)),
        (y1, x1, ly * lx),
    ]


def _bins(shape, rois, bidx, out_hw, scale, ratio, aligned):
    """Yields (roi, image, bin row, bin column, [(row, col, weight), ...]) with the weights
    already divided by the sample count."""
    n, _, h, w = shape
    oh, ow = out_hw
    off = 0.5 if aligned else 0.0
    for k, (x1, y1, x2, y2) in enumerate(np.asarray(rois, np.float64)):
        b = int(bidx[k])
        if not 0 <= b < n:
            continue
        sx, sy = x1 * scale - off, y1 * scale - off
        rw, rh = x2 * scale - off - sx, y2 * scale - off - sy
        if not aligned:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / oh, rw / ow
        for i in range(oh):
            for j in range(ow):
                taps = []
                for iy in range(ratio):
                    yy = sy + i * bh + (iy + 0.5) * bh / ratio
                    for ix in range(ratio):
                        xx = sx + j * bw + (ix + 0.5) * bw / ratio
                        taps += [(r, c, wt / ratio**2) for r, c, wt in _taps(h, w, yy, xx)]
                yield k, b, i, j, taps


def roi_align_loop(x, rois, bidx, out_hw, scale, ratio, aligned=False):
    out = np.zeros((len(rois), x.shape[1], *out_hw))
    for k, b, i, j, taps in _bins(x.shape, rois, bidx, out_hw, scale, ratio, aligned):
        for r, c, wt in taps:
            out[k, :, i, j] += wt * x[b, :, r, c].astype(np.float64)
    return out


def roi_align_grad_loop(gy, shape, rois, bidx, out_hw, scale, ratio, aligned=False):
    gx = np.zeros(shape)
    for k, b, i, j, taps in _bins(shape, rois, bidx, out_hw, scale, ratio, aligned):
        for r, c, wt in taps:
            gx[b, :, r, c] += wt * gy[k, :, i, j]
    return gx


def _problem(n=2, c=3, h=6, w=7):
    x = RNG.normal(size=(n, c, h, w)).astype(np.float32)
    rois = np.array(
        [
            [0.5, 1.0, 4.2, 5.5],  # inside
            [-3.0, -2.5, 3.0, 2.0],  # past the top-left corner: some samples are skipped
            [1.0, 1.0, 1.3, 1.2],  # shorter than a pixel: made one pixel long
            [4.0, 3.0, 11.0, 9.5],  # past the bottom-right: clamped, then skipped
            [2.2, 0.3, 6.1, 4.4],
        ],
        np.float32,
    )
    bidx = np.array([0, 1, 1, 0, 5], np.int32)  # 5: no such image, zeros
    return x, rois, bidx


# ---- values ----


def test_hand_computed_values():
    """On a linear image (value 3 y + x) a sample's value is 3 y + x wherever it has four
    neighbours; at the bottom-right edge it is clamped to the last pixel."""
    x = (3 * np.arange(3)[:, None] + np.arange(3)[None, :]).astype(np.float32)[None, None]
    rois = np.array([[0, 0, 2, 2], [1, 1, 1.2, 1.3], [2, 2, 3, 3], [5, 5, 9, 9]], np.float32)
    bidx = np.zeros(4, np.int32)
    # 2x2 bins of one pixel, 2x2 samples each at .25 / .75: means 3 * (0.5 | 1.5) + (0.5 | 1.5)
    want = np.array([[[[2.0, 3.0], [5.0, 6.0]]]], np.float32)
    check(lambda t, r, b: ops.roi_align(t, r, b, (2, 2), 1.0, 2), want, x, rois[:1], bidx[:1])
    # one bin, one sample at its centre: (1, 1); a short roi made 1 long: (1.5, 1.5); past
    # the last row and column: the last pixel (8, not 3 * 2.5 + 2.5); outside: 0
    want = np.array([4.0, 6.0, 8.0, 0.0], np.float32).reshape(4, 1, 1, 1)
    for device in DEVICES:
        check(lambda t, r, b: ops.roi_align(t, r, b, (1, 1), 1.0, 1), want, x, rois, bidx,
              device=device)  # fmt: skip
    # aligned: shifted by -0.5 with no minimum length, so the short roi samples (0.65, 0.6)
    want = np.array([2.0, 2.55, 8.0, 0.0], np.float32).reshape(4, 1, 1, 1)
    check(lambda t, r, b: ops.roi_align(t, r, b, (1, 1), 1.0, 1, aligned=True), want, x, rois,
          bidx)  # fmt: skip


def test_loop_oracle_hand_values():
    """The oracle itself on the linear image, at a few points worked out by hand."""
    img = (3 * np.arange(4)[:, None] + np.arange(5)[None, :]).astype(np.float64)[None, None]
    got = roi_align_loop(img, [[1, 0, 3, 2]], [0], (1, 2), 1.0, 1)
    # bins of 1 x 2: samples at y = 1, x = 1.5 and 2.5
    np.testing.assert_allclose(got.reshape(-1), [3 + 1.5, 3 + 2.5])
    assert _taps(4, 5, -1.5, 2.0) == [] and _taps(4, 5, 2.0, 5.5) == []


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("aligned", [False, True])
def test_matches_loop(device, aligned):
    x, rois, bidx = _problem()
    want = roi_align_loop(x, rois, bidx, (3, 2), 0.75, 2, aligned)
    assert np.count_nonzero(want[-1]) == 0 and np.count_nonzero(want[:-1]) > 0
    check(lambda t, r, b: ops.roi_align(t, r, b, (3, 2), 0.75, 2, aligned), want, x, rois, bidx,
          device=device, rtol=1e-5, atol=1e-5)  # fmt: skip


def test_sampling_ratio_three_uint32_batch_index_and_half():
    x, rois, _ = _problem(n=3, c=2, h=5, w=9)
    b = np.array([2, 0, 1, 2, 2**32 - 1], np.uint32)  # the last one: no such image
    want = roi_align_loop(x, rois, b, (2, 4), 1.3, 3)
    build = lambda t, r, i: ops.roi_align(t, r, i, (2, 4), 1.3, 3)  # noqa: E731
    check(build, want, x, rois, b, device="ipu_model", atol=1e-5)
    xh, rh = x.astype(np.float16), rois.astype(np.float16)
    want = roi_align_loop(xh, rh, b, (2, 4), 1.3, 3)
    got = check(build, want, xh, rh, b, device="ipu_model", rtol=5e-3, atol=5e-3)
    assert got[0].dtype == np.float16


# ---- gradients ----


def _grads(x, rois, bidx, seed, device, **kw):
    """(dx, drois) from autodiff of roi_align, run on ``device``; rois and batch indices are
    fed at run time."""
    ir = popxl.Ir()
    with ir.main_graph:
        xv = popxl.variable(x, name="x")
        r_in = popxl.h2d_stream(rois.shape, popxl.float32, name="rois")
        b_in = popxl.h2d_stream(bidx.shape, popxl.int32, name="bidx")
        r, b = ops.host_load(r_in, "r"), ops.host_load(b_in, "b")

        def fn(t, r, b):
            return ops.roi_align(t, r, b, **kw)

        fwd = ir.create_graph(fn, xv, r, b)
        info = popxl.transforms.autodiff(fwd)
        site = ops.call_with_info(fwd, xv, r, b)
        gy = popxl.variable(seed, name="seed")
        grads = ops.call(info.graph, gy, inputs_dict=info.inputs_dict(site))
        outs = [popxl.d2h_stream(g.shape, g.dtype) for g in grads[:2]]
        for s, g in zip(outs, grads):
            ops.host_store(s, g)
    with popxl.Session(ir, device) as session:
        got = session.run({r_in: rois, b_in: bidx})
    return [got[s] for s in outs]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("aligned", [False, True])
def test_gradient_matches_loop(device, aligned):
    x, rois, bidx = _problem()
    kw = {"output_size": (3, 2), "spatial_scale": 0.75, "sampling_ratio": 2, "aligned": aligned}
    seed = RNG.normal(size=(len(rois), x.shape[1], 3, 2)).astype(np.float32)
    dx, drois = _grads(x, rois, bidx, seed, device, **kw)
    want = roi_align_grad_loop(seed, x.shape, rois, bidx, (3, 2), 0.75, 2, aligned)
    np.testing.assert_allclose(dx, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(drois, 0)  # no gradient for the rois, as in PopART


def test_hand_computed_gradient():
    """One sample at (1.5, 1.5) shares its gradient among four pixels, one at (1, 1) gives
    it all to one pixel."""
    x = np.zeros((1, 1, 3, 3), np.float32)
    rois = np.array([[1, 1, 2, 2], [0, 0, 2, 2]], np.float32)
    seed = np.array([4.0, 2.0], np.float32).reshape(2, 1, 1, 1)
    kw = {"output_size": (1, 1), "spatial_scale": 1.0, "sampling_ratio": 1}
    dx, _ = _grads(x, rois, np.zeros(2, np.int32), seed, "ipu_model", **kw)
    want = np.array([[0, 0, 0], [0, 3, 1], [0, 1, 1]], np.float32)
    np.testing.assert_allclose(dx[0, 0], want)


def test_transpose_op_matches_its_reference_in_half():
    """RoiAlignGrad on its own (the op the gradient rule builds), in float16."""
    from tremula.popxl.ops.base import create_op

    x, rois, bidx = _problem()
    seed = RNG.normal(size=(len(rois), x.shape[1], 2, 2)).astype(np.float16)
    attrs = {
        "output_size": (2, 2), "spatial_scale": 0.9, "sampling_ratio": 2, "aligned": False,
        "input_shape": x.shape,
    }  # fmt: skip
    want = roi_align_grad_loop(seed.astype(np.float64), x.shape, rois, bidx, (2, 2), 0.9, 2)

    def build(g, r, b):
        return create_op("RoiAlignGrad", [g, r, b], attrs)[0]

    got = check(build, want, seed, rois, bidx, device="ipu_model", rtol=5e-3, atol=5e-3)
    assert got[0].dtype == np.float16


# ---- refused arguments ----


def test_errors_leave_the_graph_unchanged():
    ir = popxl.Ir()
    g = ir.main_graph
    with g:

        def var(shape, dtype, name):
            return popxl.variable(np.zeros(shape, dtype), name=name)

        x, r, b = (
            var((2, 3, 4, 4), np.float32, "x"),
            var((5, 4), np.float32, "r"),
            var(5, np.int32, "b"),
        )
        x3, xi = var((3, 4, 4), np.float32, "x3"), var((2, 3, 4, 4), np.int32, "xi")
        r3, bf, b4 = var((5, 3), np.float32, "r3"), var(5, np.float32, "bf"), var(4, np.int32, "b4")
        bad = [
            (TypeError, "rois must be a popxl.Tensor", (x, np.zeros((5, 4)), b, (2, 2), 1.0, 1)),
            (ValueError, r"t 'x3' must be \[N, C, H, W\]", (x3, r, b, (2, 2), 1.0, 1)),
            (ValueError, r"rois 'r3' must be \[num_rois, 4\]", (x, r3, b, (2, 2), 1.0, 1)),
            (TypeError, "batch_index 'bf' must be int32 or uint32", (x, r, bf, (2, 2), 1.0, 1)),
            (ValueError, r"batch_index 'b4' must be \[5\]", (x, r, b4, (2, 2), 1.0, 1)),
            (ValueError, "output_size must be", (x, r, b, 2, 1.0, 1)),
            (ValueError, "output_size must be", (x, r, b, 2.5, 1.0, 1)),
            (ValueError, "output_size must be", (x, r, b, (1, 2, 3), 1.0, 1)),
            (ValueError, "output_size must be a positive integer", (x, r, b, (2, 0), 1.0, 1)),
            (ValueError, "spatial_scale must be finite and positive", (x, r, b, (2, 2), 0.0, 1)),
            (ValueError, "sampling_ratio 0 .* not supported", (x, r, b, (2, 2), 1.0, 0)),
            (ValueError, "sampling_ratio must be a positive integer", (x, r, b, (2, 2), 1.0, 1.5)),
        ]
        before = (len(g.ops), len(g.tensors))
        for exc, match, args in bad:
            with pytest.raises(exc, match=match):
                ops.roi_align(*args)
        assert (len(g.ops), len(g.tensors)) == before  # a refused call adds nothing
        # int32 data: made, as PopART makes it; the session refuses it (Poplar takes floats)
        ops.roi_align(xi, r, b, (2, 2), 1.0, 1)
    with pytest.raises(TypeError, match=r"lowering op RoiAlign .*'xi' must be float16 or float32"):
        popxl.Session(ir, "ipu_model")
