"""poputil's linear mapping against a plain re-statement of its rule.

The rule: cut the flattened tensor into grains of ``grain_size`` elements (the last one may be
short); every tile takes ``max(ceil(grains / tiles), ceil(min_elements_per_tile / grain_size))``
grains, tile 0 first, in flattened order, until the elements run out.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as npst

from tremula import poplar
from tremula.errors import GraphError
from tremula.target import ipu2

SETTINGS = settings(max_examples=150, deadline=None)


def reference_tiles(n: int, tiles: int, min_elements: int, grain: int) -> list[int]:
    """The tile of each element, one grain at a time."""
    grains = -(-n // grain)
    per_tile = max(-(-grains // tiles), -(-min_elements // grain))
    out: list[int] = []
    tile, given_to_tile = 0, 0
    for g in range(grains):
        if given_to_tile == per_tile:
            tile, given_to_tile = tile + 1, 0
        size = min(grain, n - g * grain)
        out += [tile] * size
        given_to_tile += 1
    return out


def reference_intervals(tiles_of: list[int], tiles: int) -> list[list[tuple[int, int]]]:
    out: list[list[tuple[int, int]]] = [[] for _ in range(tiles)]
    for i, tile in enumerate(tiles_of):
        if out[tile] and out[tile][-1][1] == i:
            out[tile][-1] = (out[tile][-1][0], i + 1)
        else:
            out[tile].append((i, i + 1))
    return out


sizes = st.integers(0, 300)
tile_counts = st.integers(1, 20)
minimums = st.integers(0, 64)
grains = st.integers(1, 16)


@pytest.mark.parametrize(
    ("n", "tiles", "minimum", "grain", "expected"),
    [
        (10, 4, 0, 1, [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]),
        (10, 4, 0, 4, [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]),  # 3 grains, one per tile, tile 3 empty
        (10, 4, 6, 1, [0] * 6 + [1] * 4),  # the minimum leaves tiles 2 and 3 empty
        (10, 2, 3, 2, [0] * 6 + [1] * 4),  # 5 grains: 3 then 2
        (3, 8, 0, 1, [0, 1, 2]),
        (0, 4, 0, 1, []),
    ],
)
def test_linear_tiles_by_hand(n, tiles, minimum, grain, expected):
    np.testing.assert_array_equal(poplar.linear_tiles(n, tiles, minimum, grain), expected)
    assert reference_tiles(n, tiles, minimum, grain) == expected


@SETTINGS
@given(n=sizes, tiles=tile_counts, minimum=minimums, grain=grains)
def test_linear_tiles_follow_the_rule(n, tiles, minimum, grain):
    got = poplar.linear_tiles(n, tiles, minimum, grain)
    assert got.dtype == np.int64 and got.shape == (n,)
    np.testing.assert_array_equal(got, reference_tiles(n, tiles, minimum, grain))
    if n:
        assert got.min() == 0 and got.max() < tiles
        assert np.all(np.diff(got) >= 0)  # in order from tile 0
        counts = np.bincount(got)
        assert np.all(counts[:-1] % grain == 0)  # whole grains on all but the last tile


@SETTINGS
@given(
    shape=npst.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=7),
    tiles=tile_counts,
    minimum=minimums,
    grain=grains,
)
def test_calc_linear_tile_mapping_covers_each_element_once(shape, tiles, minimum, grain):
    g = poplar.Graph(ipu2(tiles_per_ipu=tiles))
    n = int(np.prod(shape))
    expected = reference_intervals(reference_tiles(n, tiles, minimum, grain), tiles)
    t = g.add_variable(poplar.HALF, shape, "t")
    assert poplar.calc_linear_tile_mapping(g, shape, minimum, grain) == expected
    mapping = poplar.calc_linear_tile_mapping(g, t, minimum, grain)
    assert mapping == expected
    covered = np.zeros(n, int)
    for intervals in mapping:
        for begin, end in intervals:
            covered[begin:end] += 1
    assert np.all(covered == 1)


@SETTINGS
@given(
    shape=npst.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=7),
    tiles=tile_counts,
    minimum=minimums,
    grain=grains,
)
def test_map_tensor_linearly(shape, tiles, minimum, grain):
    g = poplar.Graph(ipu2(tiles_per_ipu=tiles))
    t = g.add_variable(poplar.FLOAT, shape, "t")
    poplar.map_tensor_linearly(g, t, minimum, grain)
    n = t.num_elements
    np.testing.assert_array_equal(
        g.tiles_of(t).reshape(-1), reference_tiles(n, tiles, minimum, grain)
    )
    assert g.get_tile_mapping(t) == poplar.calc_linear_tile_mapping(g, t, minimum, grain)


@SETTINGS
@given(rows=st.integers(1, 8), cols=st.integers(1, 8), tiles=tile_counts, grain=grains)
def test_mapping_a_transposed_view_maps_the_views_order(rows, cols, tiles, grain):
    g = poplar.Graph(ipu2(tiles_per_ipu=tiles))
    x = g.add_variable(poplar.FLOAT, (rows, cols), "x")
    poplar.map_tensor_linearly(g, x.T, grain_size=grain)
    view_order = np.array(reference_tiles(rows * cols, tiles, 0, grain)).reshape(cols, rows)
    np.testing.assert_array_equal(g.tiles_of(x.T), view_order)
    np.testing.assert_array_equal(g.tiles_of(x), view_order.T)


def test_add_variable_linear_mapping_and_virtual_graphs():
    g = poplar.Graph(ipu2(tiles_per_ipu=8))
    t = g.add_variable(poplar.FLOAT, (3, 3), "t", mapping="linear")
    np.testing.assert_array_equal(g.tiles_of(t).reshape(-1), reference_tiles(9, 8, 0, 1))
    v = g.create_virtual_graph(4, 6)  # a linear mapping uses the virtual graph's tiles
    u = v.add_variable(poplar.FLOAT, 5, "u")
    poplar.map_tensor_linearly(v, u)
    np.testing.assert_array_equal(v.tiles_of(u), [0, 0, 0, 1, 1])
    np.testing.assert_array_equal(g.tiles_of(u), [4, 4, 4, 5, 5])
    assert poplar.calc_linear_tile_mapping(v, u) == [[(0, 3)], [(3, 5)]]


@pytest.mark.parametrize(("minimum", "grain"), [(0, 0), (-1, 1)])
def test_bad_grain_or_minimum(minimum, grain):
    with pytest.raises(
        GraphError,
        match=rf"grain_size \({grain}\) must be >= 1 and "
        rf"min_elements_per_tile \({minimum}\) >= 0",
    ):
        poplar.linear_tiles(10, 4, minimum, grain)
