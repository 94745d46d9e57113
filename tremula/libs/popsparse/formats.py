"""Host sparse formats: COO, CSR and CSC with PopSparse's exact semantics
(``SparseStorageFormats.hpp``).

* All indices are in **element units**, for block sparsity too: a block's row and column
  indices are those of its top-left element and are multiples of the block dimensions.
* ``nz_values`` holds ``block_area`` values per block: **row-major** inside a block for COO
  and CSR, **column-major** for CSC (the CSR <-> CSC conversions transpose inside blocks).
* CSR ``offsets`` has ``num_rows / block_rows + 1`` entries, offsets into ``nz_values`` in
  *elements* (multiples of the block area; the last one is ``len(nz_values)``), and
  ``column_indices`` one element column per block. CSC is the same with rows and columns
  exchanged (``offsets`` per block column, ``row_indices`` per block).
* ``num_rows`` / ``num_columns`` are optional where the format does not imply them (CSR
  implies the rows, CSC the columns); when given, indices are checked against them.

Every constructor validates and raises :class:`SparseFormatError` ("COO Validation failed:
..." and so on) naming the array, the position and the value at fault. Conversions return new
matrices; CSR/CSC produced here are canonical (columns sorted inside each row). Duplicate
blocks are refused by the conversions (PopLibs leaves them undefined).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tremula.libs.popsparse import validation as v
from tremula.libs.popsparse.errors import SparseFormatError
from tremula.libs.popsparse.layout import lex_order

ArrayLike = v.ArrayLike


class _Matrix:
    """What the three formats share: values, block dimensions and the optional shape."""

    FORMAT = ""
    nz_values: np.ndarray
    block_dimensions: tuple[int, int]
    num_rows: int | None
    num_columns: int | None

    @property
    def block_area(self) -> int:
        return self.block_dimensions[0] * self.block_dimensions[1]

    @property
    def num_blocks(self) -> int:
        return self.nz_values.size // self.block_area

    def block_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rows, columns, values[n, bx, by])`` of every block in storage order: element
        row and column of the top-left element, values row-major (a view where possible)."""
        raise NotImplementedError

    def _shape(self, num_rows: int | None, num_columns: int | None) -> tuple[int, int]:
        rows = self.num_rows if num_rows is None else int(num_rows)
        cols = self.num_columns if num_columns is None else int(num_columns)
        if rows is None or cols is None:
            raise SparseFormatError(
                f"{self.FORMAT}: the number of {'rows' if rows is None else 'columns'} is not "
                f"known; pass num_rows and num_columns"
            )
        return rows, cols

    def to_dense(self, num_rows: int | None = None, num_columns: int | None = None) -> np.ndarray:
        """The dense ``[num_rows][num_columns]`` matrix (zeros where no block is)."""
        rows, cols = self._shape(num_rows, num_columns)
        r, c, vals = self.block_arrays()
        bx, by = self.block_dimensions
        v.check_bounds(r, bx, rows, "row indices", self.FORMAT)
        v.check_bounds(c, by, cols, "column indices", self.FORMAT)
        dense = np.zeros((rows, cols), dtype=self.nz_values.dtype)
        ii = r[:, None, None] + np.arange(bx)[None, :, None]
        jj = c[:, None, None] + np.arange(by)[None, None, :]
        dense[ii, jj] = vals
        return dense

    def to_coo(self) -> COOMatrix:
        """The blocks as COO, sorted row-major (by row, then column)."""
        r, c, vals = _sort_blocks(*self.block_arrays(), self.FORMAT)
        return COOMatrix(
            vals.reshape(-1), r, c, self.block_dimensions, self.num_rows, self.num_columns
        )

    def to_csr(self, num_rows: int | None = None, num_columns: int | None = None) -> CSRMatrix:
        """Canonical CSR (columns sorted inside each row); needs the number of rows."""
        rows = self.num_rows if num_rows is None else num_rows
        if rows is None:
            raise SparseFormatError(
                f"{self.FORMAT} to CSR: the number of rows is not known; pass num_rows"
            )
        cols = self.num_columns if num_columns is None else num_columns
        return _csr_from_blocks(
            *self.block_arrays(), self.block_dimensions, rows, cols, self.FORMAT
        )

    def to_csc(self, num_rows: int | None = None, num_columns: int | None = None) -> CSCMatrix:
        """CSC (rows sorted inside each column, blocks column-major); needs the columns."""
        cols = self.num_columns if num_columns is None else num_columns
        if cols is None:
            raise SparseFormatError(
                f"{self.FORMAT} to CSC: the number of columns is not known; pass num_columns"
            )
        rows = self.num_rows if num_rows is None else num_rows
        r, c, vals = self.block_arrays()
        bx, by = self.block_dimensions
        t = _csr_from_blocks(c, r, vals.transpose(0, 2, 1), (by, bx), cols, rows, self.FORMAT)
        return CSCMatrix(
            t.nz_values, t.offsets, t.column_indices, self.block_dimensions, rows, cols
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.num_blocks} blocks of {self.block_dimensions}, "
            f"shape {self.num_rows}x{self.num_columns})"
        )


class COOMatrix(_Matrix):
    """Blocks given by the element row and column of their top-left element.

    Args:
        nz_values: ``num_blocks * block_area`` values, each block row-major.
        row_indices, column_indices: one element index per block, multiples of the block
            dimensions.
        block_dimensions: ``(rows, columns)`` of a block.
        num_rows, num_columns: the matrix shape, if known (indices are checked against it).

    Raises:
        SparseFormatError: "COO Validation failed: ..." for unequal index counts, a value
            count that is not ``indices x block area``, unaligned or out-of-range indices.
    """

    FORMAT = "COO"

    def __init__(
        self,
        nz_values: ArrayLike,
        row_indices: ArrayLike,
        column_indices: ArrayLike,
        block_dimensions: Sequence[int] = (1, 1),
        num_rows: int | None = None,
        num_columns: int | None = None,
    ) -> None:
        f = self.FORMAT
        self.block_dimensions = v.block_dims(block_dimensions, f)
        bx, by = self.block_dimensions
        self.nz_values = v.values(nz_values, f)
        self.row_indices = v.indices(row_indices, "row_indices", f)
        self.column_indices = v.indices(column_indices, "column_indices", f)
        self.num_rows = v.size(num_rows, "num_rows", bx, f)
        self.num_columns = v.size(num_columns, "num_columns", by, f)
        if self.row_indices.size != self.column_indices.size:
            raise SparseFormatError(
                f"COO Validation failed: {self.row_indices.size} row indices but "
                f"{self.column_indices.size} column indices"
            )
        if self.row_indices.size * bx * by != self.nz_values.size:
            raise SparseFormatError(
                f"COO Validation failed: {self.row_indices.size} blocks of {bx}x{by} need "
                f"{self.row_indices.size * bx * by} nz_values, got {self.nz_values.size}"
            )
        v.check_aligned(self.row_indices, bx, "row_indices", "rows", f)
        v.check_aligned(self.column_indices, by, "column_indices", "columns", f)
        v.check_bounds(self.row_indices, bx, self.num_rows, "row_indices", f)
        v.check_bounds(self.column_indices, by, self.num_columns, "column_indices", f)

    def block_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        bx, by = self.block_dimensions
        return self.row_indices, self.column_indices, self.nz_values.reshape(-1, bx, by)

    def change_block_size(self, block_dimensions: Sequence[int]) -> COOMatrix:
        """The same matrix with blocks of ``block_dimensions`` (sorted row-major).

        Per dimension the new size must divide the old one (blocks are split) or be a
        multiple of it (blocks are stitched; every sub-block of a new block must be present).

        Raises:
            SparseFormatError: "Cannot change rows/columns from a to b" when neither divides
                the other; "All sublocks not present in COO block change" for a new block
                with missing sub-blocks.
        """
        new = v.block_dims(block_dimensions, "COO block change")
        old = self.block_dimensions
        for name, a, b in (("rows", old[0], new[0]), ("columns", old[1], new[1])):
            if max(a, b) % min(a, b):
                raise SparseFormatError(
                    f"Cannot change {name} from {a} to {b}: neither divides the other"
                )
        for name, size, b in (
            ("num_rows", self.num_rows, new[0]),
            ("num_columns", self.num_columns, new[1]),
        ):
            if size is not None and size % b:
                raise SparseFormatError(
                    f"COO block change: {name} = {size} is not a multiple of the new block "
                    f"dimension {b}"
                )
        small = (min(old[0], new[0]), min(old[1], new[1]))
        r, c, vals = _split_blocks(*self.block_arrays(), small)
        r, c, vals = _sort_blocks(r, c, vals, "COO")
        if small != new:
            r, c, vals = _merge_blocks(r, c, vals, new)
        return COOMatrix(vals.reshape(-1), r, c, new, self.num_rows, self.num_columns)


class CSRMatrix(_Matrix):
    """Compressed sparse rows of blocks.

    Args:
        nz_values: values, each block row-major, rows of blocks one after the other.
        offsets: ``num_rows / block_rows + 1`` offsets into ``nz_values`` in elements
            (multiples of the block area, starting at 0, ending at ``len(nz_values)``).
        column_indices: the element column of each block.
        block_dimensions, num_rows, num_columns: as for :class:`COOMatrix`; ``num_rows``
            is implied by ``offsets`` (and checked against it when given).
    """

    FORMAT = "CSR"

    def __init__(
        self,
        nz_values: ArrayLike,
        offsets: ArrayLike,
        column_indices: ArrayLike,
        block_dimensions: Sequence[int] = (1, 1),
        num_rows: int | None = None,
        num_columns: int | None = None,
    ) -> None:
        f = self.FORMAT
        self.block_dimensions = v.block_dims(block_dimensions, f)
        self.nz_values = v.values(nz_values, f)
        self.offsets = v.indices(offsets, "offsets", f)
        self.column_indices = v.indices(column_indices, "column_indices", f)
        self.num_rows, self.num_columns = _compressed_checks(
            self, self.column_indices, "column_indices", num_rows, num_columns, 0
        )

    def block_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        bx, by = self.block_dimensions
        counts = np.diff(self.offsets) // self.block_area
        rows = np.repeat(np.arange(counts.size, dtype=np.int64) * bx, counts)
        return rows, self.column_indices, self.nz_values.reshape(-1, bx, by)

    def canonicalize(self) -> CSRMatrix:
        """The same matrix with the columns of each row sorted."""
        return self.to_csr()

    def change_block_size(self, block_dimensions: Sequence[int]) -> CSRMatrix:
        """Split every block into blocks of ``block_dimensions``, which must divide the
        current ones (raises "Cannot change rows/columns from a to b" otherwise; convert to
        COO to stitch blocks into larger ones)."""
        new = _check_split(self.block_dimensions, block_dimensions, "CSR")
        r, c, vals = _split_blocks(*self.block_arrays(), new)
        return _csr_from_blocks(r, c, vals, new, self.num_rows, self.num_columns, "CSR")


class CSCMatrix(_Matrix):
    """Compressed sparse columns of blocks; values inside a block are **column-major**.

    Args:
        nz_values: values, each block column-major, columns of blocks one after the other.
        offsets: ``num_columns / block_columns + 1`` offsets into ``nz_values`` in elements.
        row_indices: the element row of each block.
        block_dimensions, num_rows, num_columns: as for :class:`COOMatrix`; ``num_columns``
            is implied by ``offsets``.
    """

    FORMAT = "CSC"

    def __init__(
        self,
        nz_values: ArrayLike,
        offsets: ArrayLike,
        row_indices: ArrayLike,
        block_dimensions: Sequence[int] = (1, 1),
        num_rows: int | None = None,
        num_columns: int | None = None,
    ) -> None:
        f = self.FORMAT
        self.block_dimensions = v.block_dims(block_dimensions, f)
        self.nz_values = v.values(nz_values, f)
        self.offsets = v.indices(offsets, "offsets", f)
        self.row_indices = v.indices(row_indices, "row_indices", f)
        self.num_rows, self.num_columns = _compressed_checks(
            self, self.row_indices, "row_indices", num_rows, num_columns, 1
        )

    def block_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        bx, by = self.block_dimensions
        counts = np.diff(self.offsets) // self.block_area
        cols = np.repeat(np.arange(counts.size, dtype=np.int64) * by, counts)
        return self.row_indices, cols, self.nz_values.reshape(-1, by, bx).transpose(0, 2, 1)

    def change_block_size(self, block_dimensions: Sequence[int]) -> CSCMatrix:
        """Split every block into blocks of ``block_dimensions`` (see
        :meth:`CSRMatrix.change_block_size`)."""
        new = _check_split(self.block_dimensions, block_dimensions, "CSC")
        r, c, vals = _split_blocks(*self.block_arrays(), new)
        m = COOMatrix(vals.reshape(-1), r, c, new, self.num_rows, self.num_columns)
        return m.to_csc()


def _compressed_checks(
    m: _Matrix,
    idx: np.ndarray,
    name: str,
    num_rows: int | None,
    num_columns: int | None,
    axis: int,
) -> tuple[int | None, int | None]:
    """Validate a CSR (``axis`` 0) or CSC (``axis`` 1) matrix; return its shape."""
    f = m.FORMAT
    dims = m.block_dimensions
    sizes = [
        v.size(num_rows, "num_rows", dims[0], f),
        v.size(num_columns, "num_columns", dims[1], f),
    ]
    v.check_offsets(m.offsets, m.block_area, m.nz_values.size, f)  # type: ignore[attr-defined]
    implied = (m.offsets.size - 1) * dims[axis]  # type: ignore[attr-defined]
    what = ("num_rows", "num_columns")[axis]
    if sizes[axis] is not None and sizes[axis] != implied:
        raise SparseFormatError(
            f"{f} Validation failed: {what} = {sizes[axis]} but offsets has "
            f"{m.offsets.size} entries, i.e. {implied} {what[4:]}"  # type: ignore[attr-defined]
        )
    sizes[axis] = implied
    if idx.size * m.block_area != m.nz_values.size:
        raise SparseFormatError(
            f"{f} Validation failed: {idx.size} {name} for {m.nz_values.size} nz_values, i.e. "
            f"{m.nz_values.size // m.block_area} blocks of {dims[0]}x{dims[1]}"
        )
    other = 1 - axis
    v.check_aligned(idx, dims[other], name, ("rows", "columns")[other], f)
    v.check_bounds(idx, dims[other], sizes[other], name, f)
    return sizes[0], sizes[1]


def _check_split(old: tuple[int, int], new_dims: Sequence[int], fmt: str) -> tuple[int, int]:
    new = v.block_dims(new_dims, f"{fmt} block change")
    for name, a, b in (("rows", old[0], new[0]), ("columns", old[1], new[1])):
        if a % b:
            raise SparseFormatError(
                f"Cannot change {name} from {a} to {b}: {fmt} blocks can only be split into "
                f"blocks that divide them (convert to COO to stitch blocks together)"
            )
    return new


def _sort_blocks(
    r: np.ndarray, c: np.ndarray, vals: np.ndarray, fmt: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Blocks sorted by row then column; duplicate blocks raise."""
    if r.size and not np.all((np.diff(r) > 0) | ((np.diff(r) == 0) & (np.diff(c) > 0))):
        order = lex_order(r, c)
        r, c, vals = r[order], c[order], vals[order]
    dup = np.flatnonzero((np.diff(r) == 0) & (np.diff(c) == 0))
    if dup.size:
        i = int(dup[0])
        raise SparseFormatError(
            f"{fmt}: duplicate block at row {r[i]}, column {c[i]} (duplicate entries are not "
            f"supported)"
        )
    return r, c, vals


def _csr_from_blocks(
    r: np.ndarray,
    c: np.ndarray,
    vals: np.ndarray,
    dims: tuple[int, int],
    num_rows: int | None,
    num_columns: int | None,
    fmt: str,
) -> CSRMatrix:
    r, c, vals = _sort_blocks(r, c, vals, fmt)
    bx, by = dims
    if num_rows is None:
        raise SparseFormatError(f"{fmt} to CSR: the number of rows is not known")
    if num_rows % bx:
        raise SparseFormatError(f"{fmt} to CSR: num_rows = {num_rows} is not a multiple of {bx}")
    v.check_bounds(r, bx, num_rows, "row indices", fmt)
    counts = np.bincount(r // bx, minlength=num_rows // bx)
    offsets = np.concatenate([[0], np.cumsum(counts)]) * (bx * by)
    return CSRMatrix(vals.reshape(-1), offsets, c, dims, num_rows, num_columns)


def _split_blocks(
    r: np.ndarray, c: np.ndarray, vals: np.ndarray, new: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each ``[bx, by]`` block as ``(bx/nx) x (by/ny)`` blocks of ``new``, row-major."""
    n, bx, by = vals.shape
    nx, ny = new
    if (bx, by) == (nx, ny):
        return r, c, vals
    kx, ky = bx // nx, by // ny
    sub = vals.reshape(n, kx, nx, ky, ny).transpose(0, 1, 3, 2, 4).reshape(n * kx * ky, nx, ny)
    rows = (r[:, None, None] + (np.arange(kx) * nx)[None, :, None]).repeat(ky, axis=2)
    cols = (c[:, None, None] + (np.arange(ky) * ny)[None, None, :]).repeat(kx, axis=1)
    return rows.reshape(-1), cols.reshape(-1), sub


def _merge_blocks(
    r: np.ndarray, c: np.ndarray, vals: np.ndarray, new: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stitch sorted, distinct blocks into blocks of ``new``; all sub-blocks must exist."""
    _, bx, by = vals.shape
    nx, ny = new
    if r.size == 0:
        return r, c, vals.reshape(0, nx, ny)
    kx, ky = nx // bx, ny // by
    big_r, big_c = r // nx * nx, c // ny * ny
    order = lex_order(big_r, big_c, r, c)
    r, c, vals, big_r, big_c = r[order], c[order], vals[order], big_r[order], big_c[order]
    start = np.flatnonzero(np.r_[True, (np.diff(big_r) != 0) | (np.diff(big_c) != 0)])
    counts = np.diff(np.r_[start, r.size])
    bad = np.flatnonzero(counts != kx * ky)
    if bad.size:
        i = int(start[bad[0]])
        raise SparseFormatError(
            f"All sublocks not present in COO block change: the {nx}x{ny} block at row "
            f"{big_r[i]}, column {big_c[i]} has {counts[bad[0]]} of its {kx * ky} {bx}x{by} "
            f"sub-blocks"
        )
    m = start.size
    merged = vals.reshape(m, kx, ky, bx, by).transpose(0, 1, 3, 2, 4).reshape(m, nx, ny)
    return big_r[start], big_c[start], merged
