"""ReducePartials' gathered fold (``reduce_inplace._gathered``: many small float pieces
reduced by one ``ufunc.reduce`` where they lie in order, or copied into one buffer in piece
order first) gives the bits of
the piece-by-piece fold (``reduce_inplace._folder``) and of NumPy's own left-to-right
fold in piece order, on strided grids of pieces holding ``-0.0``, infinities and NaNs of
different payloads meeting at the same places; and it stays out where it does not apply."""

from __future__ import annotations

import numpy as np
import pytest

from tremula.libs.popops import reduce_inplace as inplace

UFUNCS = [np.add, np.multiply, np.maximum, np.minimum]


def _nan(dtype: np.dtype, payload: int, negative: bool = False) -> np.generic:
    """A quiet NaN of ``dtype`` carrying ``payload`` (and the sign bit when asked)."""
    bits = np.dtype(dtype).itemsize * 8
    kind = np.uint32 if bits == 32 else np.uint64
    mantissa = 23 if bits == 32 else 52
    exponent = (1 << (bits - 1 - mantissa)) - 1
    word = (exponent << mantissa) | (1 << (mantissa - 1)) | payload
    if negative:
        word |= 1 << (bits - 1)
    return np.array([word], dtype=kind).view(dtype)[0]


def _memory(rows: int, width: int, dtype: type, seed: int) -> np.ndarray:
    """``rows`` x ``width`` values of large and small magnitudes (the order of a sum shows
    in its bits), with columns of ``-0.0`` and special values where pieces meet."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, width)) * 10.0 ** rng.integers(-3, 7, (rows, width))
    x = x.astype(dtype)
    x[:, 0] = -0.0
    x[::2, 1] = -0.0
    x[1, 2], x[3, 2] = np.inf, -np.inf  # inf - inf: NaN
    x[2, 3], x[5, 3] = _nan(dtype, 5), _nan(dtype, 9, negative=True)  # two NaNs meet
    x[4, 4], x[0, 4] = np.inf, _nan(dtype, 3)
    x[6, 5] = np.inf
    return x


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint32 if a.itemsize == 4 else np.uint64)


def _reference(ufunc: np.ufunc, parts: list[np.ndarray]) -> np.ndarray:
    """A reduce vertex's accumulator: from the identity (the first part where none),
    combining the parts one by one in piece order."""
    acc = parts[0].copy() if ufunc.identity is None else ufunc(ufunc.identity, parts[0])
    for part in parts[1:]:
        acc = ufunc(acc, part)
    return acc


GRIDS = [  # memory rows x width, grid view (shape, strides in elements), piece axes, path
    # the MLP's second bias gradient: 128 groups of 2 columns, rows in pieces (16, 2) taken
    # as rows 0, 16, 1, 17, ...: copied in that order
    ((32, 256), ((1, 128, 16, 2, 2), (32 * 256, 2, 256, 16 * 256, 1)), (2, 3), "gathered"),
    # the first one's: rows in order, reduced where they lie
    ((32, 256), ((1, 128, 32, 2), (32 * 256, 2, 256, 1)), (2,), "in_place"),
    ((24, 40), ((1, 10, 24, 4), (24 * 40, 4, 40, 1)), (2,), "in_place"),  # a column sum's
    ((8, 64), ((1, 4, 8, 16), (8 * 64, 16, 64, 1)), (2,), "in_place"),  # GATHER_PIECES
    # pieces stepping evenly but inside each group (not outermost): copied
    ((8, 64), ((1, 4, 8, 2), (8 * 64, 128, 2, 1)), (2,), "gathered"),
    ((30, 12), ((2, 3, 5, 3, 4), (15 * 12, 4, 24, 12, 1)), (2, 3), "gathered"),  # 2 replicas
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ufunc", UFUNCS, ids=lambda u: u.__name__)
@pytest.mark.parametrize(("memory", "view", "pieces", "path"), GRIDS)
def test_gathered_fold_gives_the_folds_bits(memory, view, pieces, path, ufunc, dtype):
    data = _memory(*memory, dtype, seed=sum(memory))
    if ufunc is np.multiply:
        data[np.isfinite(data)] = 1 + np.tanh(data[np.isfinite(data)]) / 8
    shape, steps = view
    src = np.lib.stride_tricks.as_strided(data, shape, [s * data.itemsize for s in steps])
    out_shape = tuple(n for a, n in enumerate(shape) if a not in pieces)
    parts = [src[(slice(None),) * pieces[0] + p] for p in np.ndindex(*(shape[a] for a in pieces))]
    gathered_out = np.full(out_shape, 7, dtype=dtype)
    folded_out = np.full(out_shape, 7, dtype=dtype)
    run = inplace._gathered(ufunc, src, gathered_out, pieces)
    assert run is not None and run.__name__ == path
    fold = inplace._folder(ufunc, parts, folded_out)
    before = data.copy()
    with np.errstate(all="ignore"):
        run()
        run()  # a replayed run: the kept buffer reused
        fold()
        reference = _reference(ufunc, parts)
    np.testing.assert_array_equal(_bits(data), _bits(before))  # the input is only read
    np.testing.assert_array_equal(_bits(gathered_out), _bits(folded_out))
    np.testing.assert_array_equal(_bits(gathered_out), _bits(reference))
    if ufunc is np.add:  # the cases the data is made to show
        heads = np.stack([p.reshape(p.shape[0], -1)[:, 0] for p in parts])
        if np.all(heads == 0) and np.signbit(heads).all():  # a sum of -0.0 only: +0.0
            first = gathered_out.reshape(gathered_out.shape[0], -1)[:, 0]
            assert np.all(first == 0) and not np.signbit(first).any()
        else:
            assert view[0] == (1, 4, 8, 2)  # the one grid whose first sum holds a NaN
        assert np.isnan(gathered_out).any() and np.isinf(gathered_out).any()


def test_gathered_fold_stays_out_where_it_does_not_apply():
    data = np.zeros((64, 64), dtype=np.float32)
    few = data[:4].reshape(1, 1, 4, 64)
    assert inplace._gathered(np.add, few, np.zeros((1, 1, 64), np.float32), (2,)) is None
    ints = data.view(np.int32)[:16].reshape(1, 1, 16, 64)
    assert inplace._gathered(np.add, ints, np.zeros((1, 1, 64), np.int32), (2,)) is None
    half = data[:16].astype(np.float16).reshape(1, 1, 16, 64)
    assert inplace._gathered(np.add, half, np.zeros((1, 1, 64), np.float16), (2,)) is None
    big = np.zeros((1, 1, inplace.GATHER_BYTES // 256 + 1, 64), np.float32)
    assert inplace._gathered(np.add, big, np.zeros((1, 1, 64), np.float32), (2,)) is None
    wrong = data[:16].reshape(1, 1, 16, 64)
    assert inplace._gathered(np.add, wrong, np.zeros((1, 64), np.float32), (2,)) is None
    into_itself = data[:16].reshape(1, 1, 16, 64)  # an output inside the input
    assert inplace._gathered(np.add, into_itself, data[3].reshape(1, 1, 64), (2,)) is None
