"""Properties of the reduction planner (pure functions): every input element contributes
exactly once, the fan-in bound holds, final groups sit on their outputs' tiles, stage-1
vertices sit where their data is, and plans are deterministic."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tremula.libs.popops.reduce_plan import (
    ReducePlan,
    TileRuns,
    canonical_block,
    decompose,
    plan_reduction,
)


def simulate(plan: ReducePlan, x: np.ndarray) -> np.ndarray:
    """Run ``plan`` as an integer ADD reduction of the flat input ``x`` (a reference
    interpreter of the plan's data flow, one loop per vertex and group)."""
    f = plan.first
    values = [
        x[f.start[b] : f.start[b] + f.sizes[b]]
        .reshape(f.groups[b], f.outer[b], f.outputs[b], f.inner[b])
        .sum(axis=(1, 3))
        .reshape(-1)
        for b in range(f.tiles.size)
    ]
    vals = np.concatenate(values) if values else np.zeros(0, x.dtype)
    out = np.full(plan.num_outputs, -(10**9), x.dtype)
    if plan.single_stage:
        outputs = f.value_outputs()
        assert np.array_equal(np.sort(outputs), np.arange(plan.num_outputs))
        out[outputs] = vals
        return out
    source = np.concatenate([vals[np.repeat(f.computed, f.values)], x])
    for stage in plan.stages:
        data = source[stage.piece_elements()]
        results, offset = [], 0
        for length, count in zip(stage.group_lengths, stage.group_counts):
            results.append(data[offset : offset + length * count].reshape(count, length).sum(0))
            offset += length * count
        res = np.concatenate(results) if results else np.zeros(0, x.dtype)
        if stage.final:
            pos = np.concatenate(
                [np.arange(o, o + n) for o, n in zip(stage.group_outputs, stage.group_lengths)]
                or [np.zeros(0, int)]
            )
            assert np.array_equal(np.sort(pos), np.arange(plan.num_outputs))
            out[pos] = res
        else:
            source = np.concatenate([res, source])
    return out


@st.composite
def problems(draw):
    rank = draw(st.integers(1, 5))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank)))
    reduced = tuple(draw(st.lists(st.booleans(), min_size=rank, max_size=rank)))
    n = int(np.prod(shape))
    tiles_in = draw(st.integers(1, 8))
    if draw(st.booleans()):
        cuts = np.sort(draw(st.lists(st.integers(0, n), max_size=tiles_in)))
        tiles = np.searchsorted(cuts, np.arange(n), side="right")
    else:
        tiles = np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), dtype=int)
    m = int(np.prod([s for s, r in zip(shape, reduced) if not r]))
    out_tiles = np.sort(np.array(draw(st.lists(st.integers(0, 5), min_size=m, max_size=m))))
    fan_in = draw(st.integers(2, 5))
    return shape, reduced, tiles, out_tiles, fan_in, draw(st.booleans())


@settings(max_examples=150, deadline=None)
@given(problems())
def test_every_element_contributes_exactly_once(problem) -> None:
    shape, reduced, tiles, out_tiles, fan_in, copies = problem
    plan = plan_reduction(shape, reduced, TileRuns.of(tiles), out_tiles, fan_in, copies)
    x = np.random.default_rng(0).integers(-1000, 1000, shape)
    dims = tuple(i for i, r in enumerate(reduced) if r)
    np.testing.assert_array_equal(simulate(plan, x.reshape(-1)), x.sum(axis=dims).reshape(-1))
    # stage 1 covers the input once, in flat order
    f = plan.first
    assert np.array_equal(f.start, np.r_[0, np.cumsum(f.sizes)[:-1]])
    assert int(f.sizes.sum()) == x.size
    assert copies or f.computed.all()
    for stage in plan.stages:
        assert stage.group_counts.max(initial=0) <= fan_in
        assert np.all(np.diff(stage.group_tiles) >= 0)  # groups sorted by tile
        assert stage.vertex_groups.sum() == stage.group_counts.size
        if stage.final:
            np.testing.assert_array_equal(stage.group_tiles, out_tiles[stage.group_outputs])
            last = stage.group_outputs + stage.group_lengths - 1
            np.testing.assert_array_equal(stage.group_tiles, out_tiles[last])
    again = plan_reduction(shape, reduced, TileRuns.of(tiles), out_tiles, fan_in, copies)
    assert repr(again) == repr(plan)


@settings(max_examples=100, deadline=None)
@given(
    st.tuples(*[st.integers(1, 4)] * 4),
    st.lists(st.integers(0, 256), min_size=2, max_size=6),
)
def test_boxes_cover_an_interval_exactly(dims4, cuts) -> None:
    size = int(np.prod(dims4))
    bounds = np.unique(np.clip(cuts, 0, size))
    if bounds.size < 2:
        return
    lo, hi = bounds[:-1], bounds[1:]
    seg, level, blo, bhi = decompose(lo, hi, dims4)
    covered = np.zeros(size, int)
    unit = [int(np.prod(dims4[j + 1 :])) for j in range(4)]
    for s, lv, a, b in zip(seg, level, blo, bhi):
        assert lo[s] <= a < b <= hi[s]
        assert (b - a) % unit[lv] == 0 and a % unit[lv] == 0
        if lv > 0:  # inside one unit of the level above
            assert a // unit[lv - 1] == (b - 1) // unit[lv - 1]
        covered[a:b] += 1
    assert np.all(covered[lo[0] : hi[-1]] == 1)


@pytest.mark.parametrize(
    ("shape", "reduced", "block"),
    [
        ((8,), (True,), (1, 1, 1, 8)),
        ((4, 5), (False, True), (1, 1, 4, 5)),
        ((4, 5), (True, False), (1, 4, 5, 1)),
        ((2, 3, 4), (True, False, True), (1, 2, 3, 4)),
        ((2, 3, 4, 5), (False, True, False, True), (2, 3, 4, 5)),
        ((2, 1, 3, 4), (False, True, True, False), (2, 3, 4, 1)),
        ((2, 3, 4, 4), (False, True, True, False), (2, 12, 4, 1)),
        ((6,), (False,), (1, 1, 6, 1)),
    ],
)
def test_canonical_blocks(shape, reduced, block) -> None:
    prefix, kept, dims4 = canonical_block(shape, reduced)
    assert dims4 == block
    assert prefix == [] and kept == []


def test_outer_reduced_dimensions_make_blocks_that_share_outputs() -> None:
    prefix, kept, dims4 = canonical_block((3, 4, 5, 6), (True, False, True, False))
    assert (prefix, kept, dims4) == ([3], [False], (4, 5, 6, 1))


def test_full_reduction_over_many_tiles_is_a_tree() -> None:
    n, tiles = 1472 * 100, 1472
    plan = plan_reduction((n,), (True,), TileRuns.of(np.arange(n) // 100), np.zeros(1), 64)
    assert plan.first.tiles.size == tiles
    assert [s.group_counts.size for s in plan.stages] == [23, 1]
    assert plan.stages[0].vertex_tiles.size == 23  # tile-local groups of 64 tiles


def test_strided_reduction_aligns_rows_to_tiles() -> None:
    rows, cols, tiles = 64, 40, 16
    n = rows * cols
    flat_tiles = np.arange(n) // -(-n // tiles)
    plan = plan_reduction(
        (rows, cols), (True, False), TileRuns.of(flat_tiles), np.arange(cols) // 3, 8
    )
    f = plan.first
    assert np.all(f.outputs == cols) and np.all(f.inner == 1)  # whole rows only
    assert f.tiles.size == tiles


def test_bad_fan_in() -> None:
    with pytest.raises(ValueError, match="fan_in must be >= 2"):
        plan_reduction((4,), (True,), TileRuns.of(np.zeros(4)), np.zeros(1), 1)
