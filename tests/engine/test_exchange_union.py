"""The exchange planner's interval unions (``_union``, ``_regions``): the merged intervals
of each (tile, space), found from independently sorted starts and ends, against the same
intervals built element by element, and against the argsort path they replace; and
``distinct``, the sorted distinct values the compile takes instead of ``np.unique``."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from tremula.engine import exchange as X
from tremula.poplar.intervals import distinct


def _runs(
    rng: np.random.Generator, n: int, tiles: int, spaces: int, longest: int = 4
) -> X.Transfers:
    """Short runs (``longest`` elements at most: all that long if 1 or 2), many of them
    overlapping or touching (a small address range)."""
    space = rng.integers(0, spaces, n)
    low = longest if longest <= 2 else 1
    return X.Transfers(
        rng.integers(0, tiles, n),
        rng.integers(0, tiles, n),
        rng.integers(0, 60, n),
        rng.integers(low, longest + 1, n),
        space,
        np.array([4, 2, 1, 8])[space],
    )


def _reference(tile: np.ndarray, t: X.Transfers) -> list[tuple[int, int, int, int, int]]:
    """(tile, space, first, end, itemsize) of each maximal run of covered addresses, in
    (tile, space, address) order: built from the set of elements each key covers."""
    covered: dict[tuple[int, int], set[int]] = {}
    for i in range(len(t)):
        key = (int(tile[i]), int(t.space[i]))
        covered.setdefault(key, set()).update(range(int(t.start[i]), int(t.start[i] + t.length[i])))
    out = []
    for (k_tile, k_space), elems in sorted(covered.items()):
        size = int(t.itemsize[t.space == k_space][0])
        addrs = sorted(elems)
        first = addrs[0]
        for a, b in zip(addrs, [*addrs[1:], None]):
            if b != a + 1:
                out.append((k_tile, k_space, first, a + 1, size))
                first = b
    return out


def _as_rows(u: X._Union) -> list[tuple[int, int, int, int, int]]:
    columns = (u.tile, u.space, u.start, u.end, u.itemsize)
    return [tuple(int(v) for v in row) for row in zip(*columns)]  # type: ignore[misc]


@pytest.mark.parametrize("longest", [4, 1, 2])  # (runs of one length: one sort)
@pytest.mark.parametrize("seed", range(4))
def test_union_merges_overlapping_and_touching_runs_per_tile_and_space(
    seed: int, longest: int
) -> None:
    rng = np.random.default_rng(seed)
    t = _runs(rng, 400, 5, 3, longest)
    assert t.extent.uniform == (longest <= 2)
    u = X._union(t.dst, t, 5)
    assert _as_rows(u) == _reference(t.dst, t)
    expected = np.zeros(5, np.int64)
    for tile, _, first, end, size in _reference(t.dst, t):
        expected[tile] += (end - first) * size
    assert u.bytes_by_tile(5).tolist() == expected.tolist()


@pytest.mark.parametrize("offset", [1 << 31, (1 << 31) // 5])
def test_union_of_keys_and_addresses_past_32_bits(offset: int) -> None:
    """Runs whose keys and addresses do not fit the 32-bit sort (far addresses, or keys
    times the addresses' span past 2^31) merge as the others."""
    rng = np.random.default_rng(5)
    t = _runs(rng, 400, 5, 3)
    far = X.Transfers(t.src, t.dst, t.start + offset, t.length, t.space, t.itemsize)
    u = X._union(far.dst, far, 5)
    assert _as_rows(u) == _reference(far.dst, far)
    near = X._union(t.dst, t, 5)
    assert np.array_equal(u.end - u.start, near.end - near.start)


def _argsort_union(tile: np.ndarray, t: X.Transfers, tiles: int) -> X._Union:
    """The argsort path (taken when a space's runs differ in element size)."""
    sizes = t.itemsize.copy()
    sizes[0] += 1  # one run of its space with another size: no per-space size table
    odd = X.Transfers(t.src, t.dst, t.start, t.length, t.space, sizes)
    assert odd.extent.sizes is None
    u = X._union(tile, odd, tiles)
    return X._Union(u.tile, u.space, u.start, u.end, t.extent.sizes[u.space])


@pytest.mark.parametrize("seed", range(3))
def test_union_paths_agree_bit_for_bit(seed: int) -> None:
    rng = np.random.default_rng(10 + seed)
    t = _runs(rng, 2000, 40, 4)
    fast, slow = X._union(t.src, t, 40), _argsort_union(t.src, t, 40)
    for field in ("tile", "space", "start", "end", "itemsize"):
        assert np.array_equal(getattr(fast, field), getattr(slow, field)), field


@pytest.mark.parametrize("longest", [4, 2])
def test_regions_count_runs_contiguous_in_the_sending_tile(longest: int) -> None:
    rng = np.random.default_rng(7)
    t = _runs(rng, 600, 6, 2, longest)
    got = X._regions(t, None, 6)
    expected = np.zeros(6, np.int64)
    for i in range(6):  # per destination: merged runs of each (source, space)
        sel = t.dst == i
        sub = X.Transfers(*(getattr(t, f)[sel] for f in X._FIELDS))
        expected[i] = len(_reference(sub.src, sub))
    assert got.tolist() == expected.tolist()


def test_union_of_no_runs_is_empty() -> None:
    t = X.Transfers.empty()
    u = X._union(t.dst, t, 1)
    assert u.tile.size == 0 and u.bytes_by_tile(3).tolist() == [0, 0, 0]


@pytest.mark.parametrize(
    "values",
    [
        np.array([5, 3, 5, 0, -2, 3, 9], dtype=np.int64),
        np.array([[2, 2], [1, 7]], dtype=np.int32),
        np.array([], dtype=np.int64),
        np.array([4], dtype=np.uint8),
        np.array([True, False, True]),
        np.array(["mac", "amp", "mac"]),
        np.array([1.5, np.nan, 1.5, np.nan, -0.0, 0.0]),  # floats: np.unique's NaN rule
    ],
)
def test_distinct_is_np_unique(values: np.ndarray) -> None:
    got, expected = distinct(values), np.unique(values)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("offset", [0, 1 << 28, 1 << 32])  # past 32 bits: the 64-bit sort
def test_super_tile_shared_bytes_are_the_elements_both_tiles_of_a_pair_receive(
    seed: int, offset: int
) -> None:
    rng = np.random.default_rng(20 + seed)
    tiles, spaces = 8, 3
    t = _runs(rng, 500, tiles, spaces)
    t = X.Transfers(t.src, t.dst, t.start + offset, t.length, t.space, t.itemsize)
    recv = X._union(t.dst, t, tiles)
    target = SimpleNamespace(num_tiles=tiles, tiles_per_super_tile=2)
    got = X._super_tile_shared(target, recv, t.extent)  # type: ignore[arg-type]
    covered: dict[tuple[int, int], set[int]] = {}
    for tile, space, first, end, _ in _reference(t.dst, t):
        covered.setdefault((tile, space), set()).update(range(first, end))
    per_pair = np.zeros(tiles // 2, np.int64)
    for g in range(tiles // 2):
        for space in range(spaces):
            both = covered.get((2 * g, space), set()) & covered.get((2 * g + 1, space), set())
            per_pair[g] += len(both) * [4, 2, 1, 8][space]
    assert got.tolist() == np.repeat(per_pair, 2).tolist()
    # the argsort path (taken when a space's element sizes differ) gives the same bytes
    mixed = dataclasses.replace(t.extent, sizes=None)
    assert X._super_tile_shared(target, recv, mixed).tolist() == got.tolist()  # type: ignore[arg-type]


@pytest.mark.parametrize("space", [0, 2])
def test_union_and_regions_of_runs_all_in_one_space(space: int) -> None:
    """Runs sharing one space (the usual case: keyed by tile alone) merge as the others."""
    rng = np.random.default_rng(30 + space)
    t = _runs(rng, 400, 6, 1)
    t = X.Transfers(t.src, t.dst, t.start, t.length, np.full(len(t), space), t.itemsize)
    assert t.extent.only_space == space
    u = X._union(t.dst, t, 6)
    assert _as_rows(u) == _reference(t.dst, t)
    expected = np.zeros(6, np.int64)
    for i in range(6):
        sel = t.dst == i
        sub = X.Transfers(*(getattr(t, f)[sel] for f in X._FIELDS))
        expected[i] = len(_reference(sub.src, sub))
    assert X._regions(t, None, 6).tolist() == expected.tolist()
