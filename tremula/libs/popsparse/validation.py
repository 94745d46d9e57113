"""Validation of the host sparse formats (PopLibs' rules): each check raises
:class:`SparseFormatError` "<FORMAT> Validation failed: ..." naming the array, the position
and the value at fault."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tremula.libs.popsparse.errors import SparseFormatError

ArrayLike = Any


def values(nz: ArrayLike, fmt: str) -> np.ndarray:
    arr = np.asarray(nz)
    if arr.ndim != 1:
        raise SparseFormatError(f"{fmt} Validation failed: nz_values must be 1-D, got {arr.shape}")
    if arr.dtype.kind != "f":
        if arr.size and arr.dtype.kind not in "iub":
            raise SparseFormatError(f"{fmt} Validation failed: nz_values of type {arr.dtype}")
        arr = arr.astype(np.float64)
    return arr


def indices(idx: ArrayLike, name: str, fmt: str) -> np.ndarray:
    arr = np.asarray(idx)
    if arr.ndim != 1:
        raise SparseFormatError(f"{fmt} Validation failed: {name} must be 1-D, got {arr.shape}")
    if (
        arr.size
        and arr.dtype.kind not in "iu"
        and (arr.dtype.kind != "f" or not np.all(np.floor(arr) == arr))
    ):
        raise SparseFormatError(f"{fmt} Validation failed: {name} must be integers")
    arr = arr.astype(np.int64)
    bad = np.flatnonzero(arr < 0)
    if bad.size:
        i = int(bad[0])
        raise SparseFormatError(f"{fmt} Validation failed: {name}[{i}] = {arr[i]} is negative")
    return arr


def block_dims(dims: Sequence[int], fmt: str) -> tuple[int, int]:
    out = tuple(int(d) for d in dims)
    if len(out) != 2 or min(out) < 1:
        raise SparseFormatError(
            f"{fmt} Validation failed: block_dimensions = {tuple(dims)}; expected two positive "
            f"integers (rows, columns)"
        )
    return out  # type: ignore[return-value]


def size(value: int | None, name: str, block: int, fmt: str) -> int | None:
    if value is None:
        return None
    value = int(value)
    if value < 0 or value % block:
        raise SparseFormatError(
            f"{fmt} Validation failed: {name} = {value} is not a non-negative multiple of the "
            f"block dimension {block}"
        )
    return value


def check_aligned(idx: np.ndarray, block: int, name: str, what: str, fmt: str) -> None:
    bad = np.flatnonzero(idx % block)
    if bad.size:
        i = int(bad[0])
        raise SparseFormatError(
            f"{fmt} Validation failed: {name}[{i}] = {idx[i]} is not a multiple of the block "
            f"{what} {block} (indices are element indices of a block's top-left element)"
        )


def check_bounds(idx: np.ndarray, block: int, limit: int | None, name: str, fmt: str) -> None:
    if limit is None:
        return
    bad = np.flatnonzero(idx + block > limit)
    if bad.size:
        i = int(bad[0])
        raise SparseFormatError(
            f"{fmt} Validation failed: {name}[{i}] = {idx[i]} is out of range: a block of "
            f"{block} starting there ends past {limit}"
        )


def check_offsets(offsets: np.ndarray, area: int, nz_size: int, fmt: str) -> None:
    if offsets.size == 0:
        raise SparseFormatError(f"{fmt} Validation failed: offsets is empty; expected >= 1 entry")
    if offsets[0] != 0:
        raise SparseFormatError(f"{fmt} Validation failed: offsets[0] = {offsets[0]}; expected 0")
    bad = np.flatnonzero(np.diff(offsets) < 0)
    if bad.size:
        i = int(bad[0]) + 1
        raise SparseFormatError(
            f"{fmt} Validation failed: offsets[{i}] = {offsets[i]} < offsets[{i - 1}] = "
            f"{offsets[i - 1]}; offsets must not decrease"
        )
    bad = np.flatnonzero(offsets % area)
    if bad.size:
        i = int(bad[0])
        raise SparseFormatError(
            f"{fmt} Validation failed: offsets[{i}] = {offsets[i]} is not a multiple of the "
            f"block area {area} (offsets count elements of nz_values)"
        )
    if offsets[-1] != nz_size:
        raise SparseFormatError(
            f"{fmt} Validation failed: the last offset is {offsets[-1]} but nz_values has "
            f"{nz_size} elements"
        )
