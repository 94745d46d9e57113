"""Host formats (spec 1.3): conversions against scipy.sparse, block-size changes, and the
validation errors."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from tremula.libs.popsparse import COOMatrix, CSCMatrix, CSRMatrix, SparseFormatError


def _bsr(dense: np.ndarray, b: int) -> sp.bsr_matrix:
    m = sp.bsr_matrix(dense, blocksize=(b, b))
    m.sort_indices()
    return m


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from([1, 2, 4, 8]),
    st.integers(1, 6),
    st.integers(1, 6),
    st.floats(0.0, 1.0),
    st.integers(0, 2**31),
)
def test_coo_csr_csc_match_scipy(h, b, rb, cb, density, seed):
    rng = np.random.default_rng(seed)
    coo = h.random_coo(rng, rb * b, cb * b, b, density)
    dense = coo.to_dense()
    csr, csc = coo.to_csr(), coo.to_csc()
    ref = _bsr(dense, b)  # no explicit zeros: BSR keeps exactly the blocks
    assert np.array_equal(csr.offsets, ref.indptr * b * b)
    assert np.array_equal(csr.column_indices, ref.indices * b)
    assert np.array_equal(csr.nz_values, ref.data.reshape(-1))
    ref_t = _bsr(dense.T, b)  # CSC of A == BSR of A^T (blocks stored column-major)
    assert np.array_equal(csc.offsets, ref_t.indptr * b * b)
    assert np.array_equal(csc.row_indices, ref_t.indices * b)
    assert np.array_equal(csc.nz_values, ref_t.data.reshape(-1))
    if b == 1:
        s = sp.csr_matrix(dense)
        s.sort_indices()
        assert np.array_equal(csr.offsets, s.indptr)
        assert np.array_equal(csr.column_indices, s.indices)
        c = sp.csc_matrix(dense)
        c.sort_indices()
        assert np.array_equal(csc.offsets, c.indptr) and np.array_equal(csc.row_indices, c.indices)
        assert np.array_equal(csc.nz_values, c.data)
    for m in (csr, csc, csr.to_csc(), csc.to_csr(), csr.to_coo(), csc.to_coo()):
        assert np.array_equal(m.to_dense(), dense)
    back = csc.to_coo()  # sorted row-major
    assert np.array_equal(
        back.row_indices * dense.shape[1] + back.column_indices,
        np.sort(coo.row_indices * dense.shape[1] + coo.column_indices),
    )


def test_csc_blocks_are_column_major():
    coo = COOMatrix(np.arange(4.0), [0], [2], (2, 2), 2, 4)  # block [[0, 1], [2, 3]]
    csc = coo.to_csc()
    assert csc.nz_values.tolist() == [0.0, 2.0, 1.0, 3.0]
    assert csc.offsets.tolist() == [0, 0, 4] and csc.row_indices.tolist() == [0]
    assert np.array_equal(csc.to_csr().nz_values, coo.nz_values)


def test_canonicalize_sorts_columns_within_rows():
    csr = CSRMatrix([1.0, 2.0, 3.0], [0, 2, 3], [5, 1, 0], (1, 1), 2, 6)
    c = csr.canonicalize()
    assert c.column_indices.tolist() == [1, 5, 0] and c.nz_values.tolist() == [2.0, 1.0, 3.0]


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.floats(0.0, 1.0), st.integers(0, 2**31))
def test_block_size_changes(h, rb, cb, density, seed):
    rng = np.random.default_rng(seed)
    coo = h.random_coo(rng, rb * 8, cb * 8, 4, density)
    dense = coo.to_dense()
    for target in ((1, 1), (2, 2), (4, 2), (2, 4)):
        for m in (coo, coo.to_csr(), coo.to_csc()):
            small = m.change_block_size(target)
            assert small.block_dimensions == target
            assert np.array_equal(small.to_dense(), dense)
            assert small.num_blocks * small.block_area == coo.nz_values.size
    # stitching 4x4 into 8x8 works when every 8x8 block is complete
    full = h.random_coo(rng, rb * 8, cb * 8, 4, 1.0)
    big = full.change_block_size((8, 8))
    assert np.array_equal(big.to_dense(), full.to_dense())
    assert np.array_equal(big.change_block_size((4, 4)).to_csr().nz_values, full.to_csr().nz_values)
    # and from element-wise up to 4x4 and back
    fine = coo.change_block_size((1, 1))
    assert np.array_equal(fine.change_block_size((4, 4)).to_csr().nz_values, coo.to_csr().nz_values)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: COOMatrix([1.0, 2.0], [0, 1], [0], (1, 1)), "2 row indices but 1 column"),
        (lambda: COOMatrix([1.0] * 3, [0], [0], (2, 2)), "need 4 nz_values, got 3"),
        (lambda: COOMatrix([1.0] * 4, [1], [0], (2, 2)), r"row_indices\[0\] = 1 is not a multiple"),
        (lambda: COOMatrix([1.0] * 4, [0], [3], (2, 2)), r"column_indices\[0\] = 3 is not a mult"),
        (lambda: COOMatrix([1.0], [4], [0], (1, 1), 4, 4), r"row_indices\[0\] = 4 is out of range"),
        (lambda: COOMatrix([1.0], [-1], [0], (1, 1)), "is negative"),
        (lambda: COOMatrix([1.0], [0], [0], (1, 1), 5, 4), None),
        (lambda: COOMatrix([1.0] * 4, [0], [0], (2, 2), 5, 4), "num_rows = 5 is not a"),
        (lambda: CSRMatrix([1.0], [0, 2], [0], (1, 1)), "last offset is 2 but nz_values has 1"),
        (lambda: CSRMatrix([1.0] * 8, [0, 4, 8], [0], (2, 2)), "1 column_indices for 8 nz_values"),
        (lambda: CSRMatrix([1.0] * 4, [0, 2, 4], [0], (2, 2)), r"offsets\[1\] = 2 is not a mult"),
        (lambda: CSRMatrix([1.0], [0, 1, 0], [0], (1, 1)), "must not decrease"),
        (lambda: CSRMatrix([1.0], [1, 1], [0], (1, 1)), r"offsets\[0\] = 1; expected 0"),
        (lambda: CSRMatrix([1.0], [0, 1], [7], (1, 1), None, 4), "out of range"),
        (lambda: CSRMatrix([1.0], [0, 1], [0], (1, 1), 3, None), "num_rows = 3 but offsets"),
        (lambda: CSCMatrix([1.0], [0, 1], [9], (1, 1), 4, None), r"row_indices\[0\] = 9 is out"),
        (lambda: CSCMatrix([1.0] * 16, [0, 16], [2], (4, 4)), "not a multiple of the block rows"),
    ],
)
def test_validation_errors(make, match):
    if match is None:  # valid: num_rows need not be a multiple of 1
        make()
        return
    with pytest.raises(SparseFormatError, match=match) as err:
        make()
    assert isinstance(err.value, ValueError)
    assert "Validation failed" in str(err.value)


def test_conversion_errors():
    coo = COOMatrix([1.0] * 16, [0], [0], (4, 4), 16, 16)
    with pytest.raises(SparseFormatError, match="All sublocks not present in COO block change"):
        coo.change_block_size((8, 8))
    with pytest.raises(SparseFormatError, match="Cannot change rows from 4 to 8"):
        coo.to_csr().change_block_size((8, 8))
    with pytest.raises(SparseFormatError, match="Cannot change columns from 4 to 3"):
        coo.to_csc().change_block_size((4, 3))
    with pytest.raises(SparseFormatError, match="Cannot change rows from 4 to 6"):
        coo.change_block_size((6, 6))
    with pytest.raises(SparseFormatError, match="number of rows is not known"):
        COOMatrix([1.0], [0], [0]).to_csr()
    with pytest.raises(SparseFormatError, match="duplicate block at row 2, column 3"):
        COOMatrix([1.0, 2.0], [2, 2], [3, 3], (1, 1), 4, 4).to_csr()
