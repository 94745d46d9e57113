"""Indexing ops (popxl/ops/gather.py) and shape ops (popxl/ops/shape.py) through a Session
against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from tremula_tests_evaluator import check, run

import popxl
import popxl.ops as ops
from tremula.errors import PopartException

RNG = np.random.default_rng(5)


@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16])
def test_gather(axis, dtype):
    x = RNG.integers(-9, 9, (4, 5, 3)).astype(dtype)
    idx = RNG.integers(0, x.shape[axis], (2, 3)).astype(np.int32)
    check(lambda t, i: ops.gather(t, i, axis), np.take(x, idx, axis=axis), x, idx)


def test_gather_zero_oor_and_tied_gather():
    x = RNG.normal(size=(5, 3)).astype(np.float32)
    idx = np.array([0, 7, 4, -1], np.int32)
    want = np.where((idx >= 0) & (idx < 5), 1, 0)[:, None] * x[np.clip(idx, 0, 4)]
    check(lambda t, i: ops.gather(t, i, zero_OOR=True), want, x, idx)
    idx = np.array([[4, 0]], np.uint32)
    check(lambda t, i: ops.tied_gather(t, i), x[idx], x, idx)


def test_scatter_elements():
    x = np.zeros((3, 3), np.float32)
    idx = np.array([[1, 0, 2], [0, 2, 1]], np.int32)
    values = np.array([[1.0, 1.1, 1.2], [2.0, 2.1, 2.2]], np.float32)
    want = np.array([[2.0, 1.1, 0.0], [1.0, 0.0, 2.2], [0.0, 2.1, 1.2]])
    check(lambda t, i, v: ops.scatter(t, i, v), want, x, idx, values)
    idx1 = np.array([[1, -1], [0, 5], [2, 0]], np.int32)  # -1: the last; 5: ignored
    x1 = RNG.normal(size=(3, 4)).astype(np.float32)
    v1 = RNG.normal(size=(3, 2)).astype(np.float32)
    want = x1.copy()
    for r in range(3):
        for c in range(2):
            if idx1[r, c] < 4:
                want[r, idx1[r, c] % 4] = v1[r, c]
    check(lambda t, i, v: ops.scatter(t, i, v, axis=1), want, x1, idx1, v1)


def test_dynamic_slice_and_update():
    x = RNG.normal(size=(5, 6, 2)).astype(np.float32)
    index = np.array([1, 3], np.uint32)
    want = x[1:3, 3:6]
    check(lambda t, i: ops.dynamic_slice(t, i, [0, 1], [2, 3]), want, x, index)
    upd = RNG.normal(size=(2, 3, 2)).astype(np.float32)
    want = x.copy()
    want[1:3, 3:6] = upd

    def build(t, i, u):
        a = ops.dynamic_update(t, i, u, [0, 1], [2, 3])
        b = ops.dynamic_update_(t, i, u, [0, 1], [2, 3])
        return a, b, t

    check(build, [want, want, want], x, index, upd)


def test_dynamic_errors():
    x = np.zeros((4, 4), np.float32)
    with pytest.raises(ValueError, match="one per axis"):
        run(lambda t, i: ops.dynamic_slice(t, i, [0, 1], [1, 1]), x, np.zeros(1, np.uint32))
    with pytest.raises(TypeError, match="uint32"):
        run(lambda t, i: ops.dynamic_slice(t, i, [0], [1]), x, np.zeros(1, np.float32))
    with pytest.raises(ValueError, match=r"must lie in 1\.\.4"):
        run(lambda t, i: ops.dynamic_slice(t, i, [0], [5]), x, np.zeros(1, np.uint32))
    with pytest.raises(ValueError, match="t_update"):
        run(lambda t, i: ops.dynamic_update(t, i, t, [0], [2]), x, np.zeros(1, np.uint32))


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_onehot(axis):
    idx = np.array([[0, 2], [-1, 1]], np.int32)
    values = np.array([-1.0, 3.0], np.float32)
    hot = np.eye(3)[idx % 3]  # [2, 2, 3]; negative indices count from the end
    want = np.moveaxis(np.where(hot == 1, 3.0, -1.0), -1, axis)

    def build(i, v):
        return ops.onehot(i, popxl.constant(3, popxl.int32), v, axis)

    check(build, want, idx, values)


def test_concat_split_squeeze():
    a = RNG.normal(size=(2, 3)).astype(np.float32)
    b = RNG.normal(size=(2, 1)).astype(np.float32)
    cat = np.concatenate([a, b], 1)

    def build(x, y):
        c = ops.concat([x, y], axis=-1)
        v = ops.concat_([x, y], axis=1)
        p0, p1 = ops.split(c, [1, 3], axis=1)
        q = ops.split(c, 2, axis=1)
        s = ops.squeeze(y.reshape((2, 1, 1)), [1])
        return c, v, p0, p1, q[0], q[1], s, ops.squeeze(b_t(y))

    def b_t(y):
        return y.reshape((1, 2, 1))

    want = [cat, cat, cat[:, :1], cat[:, 1:], cat[:, :2], cat[:, 2:], b, b[:, 0]]
    check(build, want, a, b)
    with pytest.raises(ValueError, match="does not equally divide"):
        run(lambda x: ops.split(x, 2, axis=1), a)
    with pytest.raises(ValueError, match="do not have size 1"):
        run(lambda x: ops.squeeze(x, 0), a)
    with pytest.raises(ValueError, match="outside axis 0"):
        run(lambda x, y: ops.concat([x, y]), a, b)


def test_slice_subsample_and_inplace_slice():
    x = RNG.normal(size=(4, 5, 6)).astype(np.float32)

    def build(t):
        s1 = ops.slice(t, start=1)
        s2 = ops.slice(t, start=[0, 3], stop=[1, 1], step=[1, -1], axis=[0, 2])
        s3 = ops.slice(t, stop=-2, axis=1)
        sub = ops.subsample(t, [2, 1, 3])
        v = ops.slice_(t, start=1, stop=3)
        v += 1.0  # writes reach t
        return s1, s2, s3, sub, t

    y = x.copy()
    y[1:3] += 1
    want = [x[1:], x[0:1, :, 3:1:-1], x[:, :-2], x[::2, :, ::3], y]
    got, _ = run(build, x)
    for g, e in zip(got[:4], want[:4]):
        np.testing.assert_array_equal(g, e)
    np.testing.assert_allclose(got[4], y)
    with pytest.raises(ValueError, match="step 2"):
        run(lambda t: ops.slice(t, 0, 4, 2), x)
    with pytest.raises(PopartException, match=r"strides \[0, 1, 1\] .* must be integers >= 1"):
        run(lambda t: ops.subsample(t, [0, 1, 1]), x)


def test_subsample_strides_as_popxl_takes_them():
    """spec popxl-fidelity 7: an int is a stride for axis 0; a short list is padded with
    1s in place; a short tuple is a TypeError; too many strides a ValueError."""
    x = RNG.normal(size=(5, 4, 3)).astype(np.float32)
    strides = [2, 3]
    got, _ = run(lambda t: (ops.subsample(t, 2), ops.subsample(t, strides)), x)
    np.testing.assert_array_equal(got[0], x[::2])
    np.testing.assert_array_equal(got[1], x[::2, ::3])
    assert strides == [2, 3, 1]
    assert got[0].shape == (3, 4, 3)  # ceil(5 / 2)
    with pytest.raises(TypeError):
        run(lambda t: ops.subsample(t, (2, 3)), x)
    with pytest.raises(ValueError, match="must not be greater than the rank"):
        run(lambda t: ops.subsample(t, [1, 1, 1, 1]), x)


def _scatter_reduce_loop(data, idx, reduction, axis, size, initial=None):
    """torch_scatter's rule, one element at a time: with ``initial`` the output starts from
    it; without, from nothing (positions no index reaches are 0)."""
    out_shape = tuple(size if d == axis else s for d, s in enumerate(data.shape))
    idx = np.broadcast_to(
        idx.reshape([-1 if d == axis else 1 for d in range(data.ndim)]) if idx.ndim == 1 else idx,
        data.shape,
    )
    out = {} if initial is None else {p: initial[p] for p in np.ndindex(out_shape)}
    combine = {
        "sum": lambda a, b: a + b, "max": max, "min": min, "mul": lambda a, b: a * b,
        "none": lambda a, b: b,
    }[reduction]  # fmt: skip
    for p in np.ndindex(data.shape):
        i = int(idx[p])
        i = i + size if i < 0 else i
        if not 0 <= i < size:
            continue
        q = tuple(i if d == axis else c for d, c in enumerate(p))
        out[q] = data[p] if q not in out else combine(out[q], data[p])
    result = np.zeros(out_shape, data.dtype)
    for q, v in out.items():
        result[q] = v
    return result


@pytest.mark.parametrize("reduction", ["sum", "max", "min", "mul", "none"])
@pytest.mark.parametrize("initial", [False, True])
@pytest.mark.parametrize("device", ["cpu", "ipu_model"])
def test_scatter_reduce(reduction, initial, device):
    data = RNG.integers(-5, 6, (6, 3)).astype(np.float32)
    idx = np.array([[1, 3, 0], [3, -1, 1], [1, 1, 9], [0, 3, -4], [2, 3, 1], [3, 0, 1]], np.int32)
    init = RNG.integers(-5, 6, (4, 3)).astype(np.float32)
    want = _scatter_reduce_loop(data, idx, reduction, 0, 4, init if initial else None)
    if initial:
        build = lambda d, i, v: ops.scatter_reduce(d, i, reduction, initial_values=v)  # noqa: E731
        check(build, want, data, idx, init, device=device)
    else:
        build = lambda d, i: ops.scatter_reduce(d, i, reduction, axis_size=4)  # noqa: E731
        check(build, want, data, idx, device=device)


@pytest.mark.parametrize("reduction", ["sum", "max", "mul"])
def test_scatter_reduce_broadcast_indices_axis1_and_integers(reduction):
    data = RNG.integers(-4, 5, (3, 7)).astype(np.int32)
    idx = np.array([0, 4, 4, -2, 1, 5, 0], np.int32)  # 1-D along axis 1; 5 is out of range
    want = _scatter_reduce_loop(data, idx, reduction, 1, 5)
    build = lambda d, i: ops.scatter_reduce(d, i, reduction, axis=1, axis_size=5)  # noqa: E731
    check(build, want, data, idx, device="ipu_model")


def test_scatter_reduce_errors():
    ir = popxl.Ir()
    with ir.main_graph:
        d = popxl.variable(np.zeros((4, 3), np.float32))
        i = popxl.variable(np.zeros((4, 3), np.int32))
        with pytest.raises(ValueError, match="reduction 'mean'"):
            ops.scatter_reduce(d, i, "mean", axis_size=2)
        with pytest.raises(ValueError, match="axis_size"):
            ops.scatter_reduce(d, i)
        with pytest.raises(ValueError, match="must have data"):
            ops.scatter_reduce(d, popxl.variable(np.zeros((2, 3), np.int32)), axis_size=2)
        with pytest.raises(TypeError, match="initial_values"):
            ops.scatter_reduce(d, i, initial_values=popxl.variable(np.zeros((2, 3), np.int32)))
        bad = popxl.variable(np.zeros((4, 3), np.float32))
        g = ir.main_graph
        before = (len(g.ops), len(g.constants))
        with pytest.raises(TypeError, match="indices"):
            ops.scatter_reduce(d, bad, axis_size=2)
        with pytest.raises(ValueError, match="reduction 'mean'"):  # host indices
            ops.scatter_reduce(d, np.zeros((4, 3), np.int32), "mean", axis_size=2)
        with pytest.raises(ValueError, match=r"indices \(2,\) must have"):
            ops.scatter_reduce(d, [0, 1], axis_size=2)
        assert (len(g.ops), len(g.constants)) == before  # a refused call adds nothing


# ---- groupedgather ----


def _grouped_gather_loop(x, idx, axis):
    """Group by group, index by index: ``out[g][..., p, ...] = x[g]`` at ``idx[g][p]`` on
    ``axis - 1`` of the group (zeros for an index outside the axis)."""
    inner = axis - 1
    n = x.shape[axis]
    groups = []
    for g in range(x.shape[0]):
        data = np.moveaxis(x[g], inner, 0)
        picked = np.zeros((*idx.shape[1:], *data.shape[1:]), x.dtype)
        for p in np.ndindex(*idx.shape[1:]):
            i = int(idx[g][p])
            if 0 <= i < n:
                picked[p] = data[i]
        k = idx.ndim - 1  # the index axes go where the gathered axis was
        groups.append(np.moveaxis(picked, list(range(k)), list(range(inner, inner + k))))
    return np.stack(groups)


def _grouped_scatter_loop(gy, idx, shape, axis):
    """The gradient of :func:`_grouped_gather_loop`: each output row added back where it came
    from."""
    inner, n, k = axis - 1, shape[axis], idx.ndim - 1
    gx = np.zeros(shape)
    for g in range(shape[0]):
        rows = np.moveaxis(gy[g], list(range(inner, inner + k)), list(range(k)))
        target = np.moveaxis(gx[g], inner, 0)  # a view: writes reach gx
        for p in np.ndindex(*idx.shape[1:]):
            i = int(idx[g][p])
            if 0 <= i < n:
                target[i] += rows[p]
    return gx


@pytest.mark.parametrize("axis", [1, 2, -1])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16])
@pytest.mark.parametrize("device", ["cpu", "ipu_model"])
def test_groupedgather(axis, dtype, device):
    x = RNG.integers(-9, 9, (3, 4, 5, 2)).astype(dtype)
    n = x.shape[axis]
    idx = RNG.integers(0, n, (3, 2, 3)).astype(np.int32)
    idx[0, 0, 0], idx[2, 1, 2] = n, -1  # out of range: zeros
    want = _grouped_gather_loop(x, idx, axis % x.ndim)
    assert want.shape == (*x.shape[: axis % 4], 2, 3, *x.shape[axis % 4 + 1 :])
    build = lambda t, i: ops.groupedgather(t, i, axis, group_size=3)  # noqa: E731
    got = check(build, want, x, idx, device=device)
    assert got[0].dtype == dtype


def test_groupedgather_one_index_per_group_uint32_and_host_indices():
    x = RNG.normal(size=(4, 6, 3)).astype(np.float32)
    idx = np.array([5, 0, 2, 7], np.uint32)  # [G]: one index per group, the axis goes away
    want = _grouped_gather_loop(x, idx, 1)
    assert want.shape == (4, 3)
    check(lambda t, i: ops.groupedgather(t, i, 1, 4), want, x, idx, device="ipu_model")
    host = [[1, 1], [0, 2], [2, 0], [1, 2]]  # host integers: an int32 constant, axis 2
    want = _grouped_gather_loop(x, np.array(host), 2)
    check(lambda t: ops.groupedgather(t, host, axis=2, group_size=4), want, x)


@pytest.mark.parametrize("device", ["cpu", "ipu_model"])
def test_groupedgather_gradient_is_a_grouped_scatter_add(device):
    x = RNG.normal(size=(2, 3, 5)).astype(np.float32)
    idx = np.array([[[4, 0], [4, 4]], [[1, 9], [-2, 1]]], np.int32)  # repeats add up
    seed = RNG.normal(size=(2, 3, 2, 2)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        xv, iv = popxl.variable(x, name="x"), popxl.variable(idx, name="idx")
        fwd = ir.create_graph(lambda t, i: ops.groupedgather(t, i, axis=2, group_size=2), xv, iv)
        info = popxl.transforms.autodiff(fwd)
        site = ops.call_with_info(fwd, xv, iv)
        gx = ops.call(info.graph, popxl.variable(seed), inputs_dict=info.inputs_dict(site))[0]
        stream = popxl.d2h_stream(gx.shape, gx.dtype)
        ops.host_store(stream, gx)
    with popxl.Session(ir, device) as session:
        got = session.run()[stream]
    np.testing.assert_allclose(got, _grouped_scatter_loop(seed, idx, x.shape, 2), rtol=1e-6)


def test_groupedgather_errors_leave_the_graph_unchanged():
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        x = popxl.variable(np.zeros((3, 4, 2), np.float32), name="x")
        idx = popxl.variable(np.zeros((3, 2), np.int32), name="idx")
        idx2 = popxl.variable(np.zeros((2, 2), np.int32), name="idx2")
        fidx = popxl.variable(np.zeros((3, 2), np.float32), name="fidx")
        flat = popxl.variable(np.zeros(3, np.float32), name="flat")
        before = (len(g.ops), len(g.tensors))
        bad = [
            (ValueError, r"indices 'idx2' must be \[group_size=3, \.\.\.\]", (x, idx2, 1, 3)),
            (ValueError, r"indices \(host array\) must be \[group_size=3", (x, [[0], [1]], 1, 3)),
            (ValueError, r"t 'x' has 3 group\(s\) .* group_size is 2", (x, idx, 1, 2)),
            (ValueError, "axis 3 is out of range for 'x'", (x, idx, 3, 3)),
            (ValueError, "axis 0 is the group dimension of 'x'", (x, idx, 0, 3)),
            (ValueError, "axis -3 is the group dimension", (x, idx, -3, 3)),
            (ValueError, "group_size must be a positive integer", (x, idx, 1, 0)),
            (TypeError, "indices 'fidx' must be int32 or uint32", (x, fidx, 1, 3)),
            (TypeError, "indices must be integers", (x, np.zeros((3, 1)), 1, 3)),
            (
                ValueError,
                r"t 'flat' must be \[group_size, \.\.\.\] of rank >= 2",
                (flat, idx, 1, 3),
            ),
            (TypeError, "t must be a popxl.Tensor", (np.zeros((3, 4)), idx, 1, 3)),
        ]
        for exc, match, (t, i, axis, groups) in bad:
            with pytest.raises(exc, match=match):
                ops.groupedgather(t, i, axis=axis, group_size=groups)
        assert (len(g.ops), len(g.tensors)) == before  # a refused call adds nothing
