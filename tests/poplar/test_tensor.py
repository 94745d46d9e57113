"""Tensor views against NumPy: a view's addresses, less its variable's first address, equal the
same NumPy operation applied to ``np.arange(n).reshape(shape)``.

The NumPy references below are written independently of ``tremula/poplar/tensor.py`` where
that is possible (reshape instead of ``expand_dims``, repeated concatenation instead of
``np.tile``, an explicit permutation instead of ``moveaxis``...).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as npst

from tremula import poplar
from tremula.errors import TensorError
from tremula.target import ipu2

SETTINGS = settings(max_examples=40, deadline=None)
MAX_ELEMENTS = 400  # growing ops (broadcast, upsample, concat) stay below this


def new_graph() -> poplar.Graph:
    return poplar.Graph(ipu2(tiles_per_ipu=4))


def variable(shape: tuple[int, ...], name: str = "v") -> tuple[poplar.Tensor, np.ndarray, int]:
    """A variable allocated after another one (so its first address is not 0), its NumPy
    reference and its first address."""
    g = new_graph()
    g.add_variable(poplar.FLOAT, (5,), "before")
    t = g.add_variable(poplar.FLOAT, shape, name)
    n = int(np.prod(shape, dtype=np.int64))
    start = int(t.addresses.reshape(-1)[0]) if n else 0
    np.testing.assert_array_equal(t.addresses.reshape(-1), np.arange(start, start + n))
    return t, np.arange(n).reshape(shape), start


def assert_view(t: poplar.Tensor, start: int, ref: np.ndarray) -> None:
    assert t.shape == ref.shape
    assert t.rank == ref.ndim
    assert t.num_elements == ref.size
    np.testing.assert_array_equal(t.addresses - start, ref, strict=True)


# ---- one random application of each view, with its NumPy reference ----
# Each op draws its arguments, returns (view, reference), or None when it does not apply.
Op = Callable[[st.DataObject, poplar.Tensor, np.ndarray], "tuple | None"]


def _dim(data: st.DataObject, ref: np.ndarray) -> int:
    return data.draw(st.integers(-ref.ndim, ref.ndim - 1), label="dim")


def _key(ndim: int, d: int, s: slice) -> tuple:
    return (slice(None),) * (d % ndim) + (s,)


def op_index(data, t, ref):
    key = data.draw(npst.basic_indices(ref.shape, allow_newaxis=True), label="key")
    return t[key], ref[key]


def op_int_array(data, t, ref):
    if ref.size == 0:
        return None
    key = data.draw(
        npst.integer_array_indices(
            ref.shape, result_shape=npst.array_shapes(min_dims=1, max_dims=2, max_side=3)
        )
    )
    return t[key], ref[key]


def op_slice(data, t, ref):
    d = _dim(data, ref)
    b = data.draw(st.integers(0, ref.shape[d]))
    e = data.draw(st.integers(b, ref.shape[d]))
    return t.slice(b, e, d), ref[_key(ref.ndim, d, slice(b, e))]


def op_slice_all(data, t, ref):
    begin = [data.draw(st.integers(0, s)) for s in ref.shape]
    end = [data.draw(st.integers(b, s)) for b, s in zip(begin, ref.shape)]
    return t.slice(begin, end), ref[tuple(slice(b, e) for b, e in zip(begin, end))]


def op_reshape(data, t, ref):
    n, shape = ref.size, []
    for _ in range(data.draw(st.integers(0, 2))):
        if n == 0:
            shape.append(data.draw(st.integers(0, 3)))
            continue
        f = data.draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]))
        shape.append(f)
        n //= f
    shape.append(n)
    return t.reshape(shape), ref.reshape(shape)


def op_flatten(data, t, ref):
    return t.flatten(), ref.reshape(ref.size)


def op_flatten_range(data, t, ref):
    start = data.draw(st.integers(0, ref.ndim - 1))
    end = data.draw(st.integers(start + 1, ref.ndim))
    s = ref.shape
    return t.flatten(start, end), ref.reshape((*s[:start], int(np.prod(s[start:end])), *s[end:]))


def op_transpose(data, t, ref):
    if ref.ndim != 2:
        return None
    view = t.T if data.draw(st.booleans()) else t.transpose()
    return view, np.einsum("ij->ji", ref)


def op_dim_shuffle(data, t, ref):
    perm = data.draw(st.permutations(range(ref.ndim)))
    return t.dim_shuffle(perm), ref.transpose(perm)


def op_dim_roll(data, t, ref):
    d = _dim(data, ref)
    new = data.draw(st.integers(0, ref.ndim - 1))
    perm = [i for i in range(ref.ndim) if i != d % ref.ndim]
    perm.insert(new, d % ref.ndim)
    return t.dim_roll(d, new), ref.transpose(perm)


def op_expand(data, t, ref):
    d = data.draw(st.integers(0, ref.ndim))
    return t.expand([d]), ref.reshape((*ref.shape[:d], 1, *ref.shape[d:]))


def op_squeeze(data, t, ref):
    ones = [i for i, s in enumerate(ref.shape) if s == 1]
    if not ones:
        return None
    dims = data.draw(st.lists(st.sampled_from(ones), min_size=1, unique=True))
    keep = tuple(s for i, s in enumerate(ref.shape) if i not in dims)
    return t.squeeze(dims), ref.reshape(keep)


def op_squeeze_all(data, t, ref):
    return t.squeeze(), ref.reshape(tuple(s for s in ref.shape if s != 1))


def op_broadcast(data, t, ref):
    d = _dim(data, ref)
    n = data.draw(st.integers(1, 4))
    if ref.size * n > MAX_ELEMENTS:
        return None
    return t.broadcast(n, d), np.concatenate([ref] * n, axis=d)


def op_broadcast_to(data, t, ref):
    lead = data.draw(st.integers(1, 3))
    shape = (lead, *tuple(data.draw(st.integers(1, 3)) if s == 1 else s for s in ref.shape))
    if int(np.prod(shape)) > MAX_ELEMENTS:
        return None
    return t.broadcast_to(shape), np.broadcast_to(ref, shape)


def op_reverse(data, t, ref):
    d = _dim(data, ref)
    return t.reverse(d), ref[_key(ref.ndim, d, slice(None, None, -1))]


def op_subsample(data, t, ref):
    d, stride = _dim(data, ref), data.draw(st.integers(1, 4))
    return t.subsample(stride, d), ref[_key(ref.ndim, d, slice(0, None, stride))]


def op_upsample(data, t, ref):
    d, scale = _dim(data, ref), data.draw(st.integers(1, 3))
    if ref.size * scale > MAX_ELEMENTS:
        return None
    return t.upsample(scale, d), np.repeat(ref, scale, axis=d)


def op_concat(data, t, ref):
    d = _dim(data, ref)
    if ref.size * 2 > MAX_ELEMENTS:
        return None
    other, other_ref = t.reverse(d), np.flip(ref, axis=d)
    return poplar.concat([t, other], d), np.concatenate([ref, other_ref], axis=d)


OPS: dict[str, Op] = {
    f.__name__.removeprefix("op_"): f
    for f in (
        op_index,
        op_int_array,
        op_slice,
        op_slice_all,
        op_reshape,
        op_flatten,
        op_flatten_range,
        op_transpose,
        op_dim_shuffle,
        op_dim_roll,
        op_expand,
        op_squeeze,
        op_squeeze_all,
        op_broadcast,
        op_broadcast_to,
        op_reverse,
        op_subsample,
        op_upsample,
        op_concat,
    )
}

shapes = npst.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=5)


@pytest.mark.parametrize("name", sorted(OPS))
@SETTINGS
@given(shape=shapes, data=st.data())
def test_each_view_matches_numpy(name, shape, data):
    t, ref, start = variable(shape)
    out = OPS[name](data, t, ref)
    assume(out is not None)
    view, expected = out
    assert_view(view, start, expected)


@settings(max_examples=150, deadline=None)
@given(shape=shapes, data=st.data())
def test_random_view_chains_match_numpy(shape, data):
    t, ref, start = variable(shape)
    for _ in range(data.draw(st.integers(1, 6), label="length")):
        if ref.ndim == 0:
            t, ref = t.reshape((1,)), ref.reshape((1,))
        name = data.draw(st.sampled_from(sorted(OPS)), label="op")
        out = OPS[name](data, t, ref)
        if out is not None:
            t, ref = out
            assert_view(t, start, ref)


# ---- hand-picked cases ----
def test_indexing_by_hand():
    t, ref, s = variable((3, 4, 5))
    assert_view(t[1], s, ref[1])
    assert_view(t[-1, ::-2], s, ref[-1, ::-2])
    assert_view(t[..., 1:4:2], s, ref[..., 1:4:2])
    assert_view(t[None, 0, ..., None], s, ref[None, 0, ..., None])
    assert_view(t[[2, 0, 2]], s, ref[[2, 0, 2]])
    assert_view(t[np.array([[0], [2]]), :, np.array([1, 3])], s, ref[[[0], [2]], :, [1, 3]])
    assert_view(t.index([2, 1]), s, ref[2, 1])
    assert [v.shape for v in t.slices([(0, 1), (1, 3)])] == [(1, 4, 5), (2, 4, 5)]


def test_broadcast_repeats_the_tensor_along_dim():
    t, _, s = variable((2, 3))
    # size-1 dim: a plain broadcast
    np.testing.assert_array_equal(t[:1].broadcast(3, 0).addresses - s, [[0, 1, 2]] * 3)
    # a larger dim: the whole tensor N times (Poplar's broadcast), not each element N times
    np.testing.assert_array_equal(
        t.broadcast(2, 1).addresses - s, [[0, 1, 2, 0, 1, 2], [3, 4, 5, 3, 4, 5]]
    )
    np.testing.assert_array_equal(
        t.broadcast(2, 0).addresses - s, [[0, 1, 2], [3, 4, 5], [0, 1, 2], [3, 4, 5]]
    )
    np.testing.assert_array_equal(
        t.upsample(2, 1).addresses - s, [[0, 0, 1, 1, 2, 2], [3, 3, 4, 4, 5, 5]]
    )


def test_expand_repeated_index_adds_several_dims():
    t, ref, s = variable((2, 3))
    assert_view(t.expand([0, 0]), s, ref.reshape(1, 1, 2, 3))
    assert_view(t.expand([2]), s, ref.reshape(2, 3, 1))


def test_expand_indices_name_dims_of_the_original_tensor():
    t, ref, s = variable((2, 3))
    assert_view(t.expand([1, 2]), s, ref.reshape(2, 1, 3, 1))


def test_scalar_tensor():
    t, ref, s = variable(())
    assert t.rank == 0 and t.num_elements == 1 and t.shape == ()
    assert_view(t.reshape((1, 1)), s, ref.reshape(1, 1))
    assert_view(t.expand([0]), s, ref.reshape(1))
    with pytest.raises(TensorError, match="scalar"):
        len(t)


def test_queries():
    g = new_graph()
    a = g.add_variable(poplar.FLOAT, (2, 3), "alpha")
    b = g.add_variable(poplar.FLOAT, (2, 3), "beta")
    h = g.add_variable(poplar.HALF, (2, 3), "gamma")
    other = new_graph().add_variable(poplar.FLOAT, (2, 3), "alpha")
    assert len(a) == 2 and a.num_elements == 6 and a.rank == 2 and a.numel == 6
    assert a.element_type is poplar.FLOAT
    assert "alpha" in repr(a) and "[2,3]" in repr(a)
    assert "alpha" in repr(poplar.concat([a, b])) and "beta" in repr(poplar.concat([a, b]))
    # contiguity: consecutive addresses in row-major order
    assert a.is_contiguous() and a[1:].is_contiguous() and a[1, 1:].is_contiguous()
    assert not a.T.is_contiguous() and not a[:, :2].is_contiguous()
    assert not a.reverse(1).is_contiguous() and not a[:1].broadcast(2, 0).is_contiguous()
    assert a[0, 1:1].is_contiguous() and a[:, 2:].flatten()[:1].is_contiguous()
    # intersection: shared elements of the same variable space
    assert a[0].intersects_with(a[:, 0]) and not a[0].intersects_with(a[1])
    assert not a.intersects_with(b) and not a.intersects_with(h)
    assert not a.intersects_with(other)
    # aliases: an element named twice
    assert not a.contains_aliases() and not a.T.reverse(0).contains_aliases()
    assert a[:1].broadcast(2, 0).contains_aliases() and a.broadcast(2, 1).contains_aliases()
    assert poplar.concat([a, a]).contains_aliases() and a[[0, 0]].contains_aliases()
    # same_as: same graph, type, shape and elements
    assert a.T.T.same_as(a) and a.reverse(0).reverse(0).same_as(a) and a[0].same_as(a[0])
    assert not a.same_as(a.reshape((3, 2))) and not a.same_as(b) and not a.same_as(other)
    assert not a.same_as(a.reverse(1))


# ---- errors: TensorError (a ValueError) naming the shape or dimension ----
ERRORS = [
    (lambda a: a.reshape((4,)), r"cannot reshape tensor of shape (2, 3) (6 elements) to (4,)"),
    (lambda a: a.reshape((7, 1)), r"to (7, 1)"),
    (lambda a: a.slice(1, 5, 1), r"slice [1, 5) out of range for dimension 1 of size 3"),
    (lambda a: a.slice(2, 1), r"slice [2, 1) out of range for dimension 0 of size 2"),
    (lambda a: a.slice(0, 1, 2), r"dimension 2 out of range for a rank-2 tensor"),
    (lambda a: a.slice([0], [1]), r"must have 2 entries"),
    (lambda a: a.slice([0, 0], [1, 4]), r"slice [0, 4) out of range for dimension 1 of size 3"),
    (lambda a: a[2], r"cannot index tensor of shape (2, 3) with 2"),
    (lambda a: a[0, 0, 0], r"cannot index tensor of shape (2, 3)"),
    (lambda a: a[[0, 5]], r"cannot index tensor of shape (2, 3)"),
    (lambda a: a.dim_shuffle((0, 0)), r"dim_shuffle: (0, 0) is not a permutation of 0..1"),
    (lambda a: a.dim_shuffle((1, 0, 2)), r"(1, 0, 2) is not a permutation of 0..1"),
    (lambda a: a.squeeze([1]), r"squeeze: dimension 1 has size 3, not 1"),
    (lambda a: a.squeeze([2]), r"squeeze: dimension 2 out of range for a rank-2 tensor"),
    (
        lambda a: a.reshape((1, 2, 3)).transpose(),
        r"transpose needs a rank-2 tensor, got shape (1, 2, 3)",
    ),
    (lambda a: a.flatten(1, 1), r"flatten [1, 1) invalid for rank 2"),
    (lambda a: a.flatten(0, 3), r"flatten [0, 3) invalid for rank 2"),
    (lambda a: a.expand([3]), r"expand: index 3 out of range for rank 2"),
    (lambda a: a.broadcast(0, 1), r"broadcast: count 0 must be >= 1"),
    (lambda a: a.broadcast(2, -3), r"broadcast: dimension -3 out of range for a rank-2 tensor"),
    (lambda a: a.broadcast_to((2, 4)), r"cannot broadcast shape (2, 3) to (2, 4)"),
    (lambda a: a.reverse(2), r"reverse: dimension 2 out of range for a rank-2 tensor"),
    (lambda a: a.subsample(0, 0), r"subsample: stride 0 must be >= 1"),
    (lambda a: a.subsample(1, 5), r"subsample: dimension 5 out of range"),
    (lambda a: a.upsample(2, 2), r"upsample: dimension 2 out of range"),
    (lambda a: a.dim_roll(2), r"dim_roll: dimension 2 out of range for a rank-2 tensor"),
    (lambda a: poplar.concat([a, a], 2), r"concat: dimension 2 out of range"),
]


@pytest.mark.parametrize(("call", "message"), ERRORS)
def test_bad_views_raise_tensor_error(call, message):
    g = new_graph()
    a = g.add_variable(poplar.FLOAT, (2, 3), "a")
    with pytest.raises(TensorError, match=re.escape(message)) as info:
        call(a)
    assert isinstance(info.value, ValueError)


def test_bad_concats_raise_tensor_error():
    g = new_graph()
    a = g.add_variable(poplar.FLOAT, (2, 3), "a")
    with pytest.raises(TensorError, match=re.escape("tensor 1 has type half, tensor 0 has float")):
        poplar.concat([a, g.add_variable(poplar.HALF, (2, 3), "h")])
    with pytest.raises(TensorError, match="tensor 1 belongs to another graph"):
        poplar.concat([a, new_graph().add_variable(poplar.FLOAT, (2, 3), "a")])
    with pytest.raises(TensorError, match=re.escape("incompatible shapes [(2, 3), (2, 4)]")):
        poplar.concat([a, g.add_variable(poplar.FLOAT, (2, 4), "b")])
    with pytest.raises(TensorError, match=re.escape("incompatible shapes [(2, 3), (3,)]")):
        poplar.concat([a, g.add_variable(poplar.FLOAT, (3,), "c")], 1)
    with pytest.raises(TensorError, match="empty list"):
        poplar.concat([])


def test_dim_roll_bad_new_position_raises_tensor_error():
    a = new_graph().add_variable(poplar.FLOAT, (2, 3), "a")
    with pytest.raises(TensorError, match="dim_roll"):
        a.dim_roll(0, 5)


def test_upsample_negative_scale_raises_tensor_error():
    a = new_graph().add_variable(poplar.FLOAT, (2, 3), "a")
    with pytest.raises(TensorError, match="upsample"):
        a.upsample(-1, 0)
