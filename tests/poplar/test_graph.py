"""The graph: variables, constants, tile mappings, virtual graphs and handles (vertices and
``verify`` are in ``test_vertices.py``)."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as npst

from tremula import poplar
from tremula.errors import GraphError
from tremula.target import ipu2

SETTINGS = settings(max_examples=60, deadline=None)


def new_graph(tiles: int = 4, ipus: int = 1, replicas: int = 1) -> poplar.Graph:
    return poplar.Graph(ipu2(tiles_per_ipu=tiles, num_ipus=ipus), replication_factor=replicas)


def per_element_tiles(mapping: list[list[tuple[int, int]]], n: int) -> np.ndarray:
    """Rebuild the tile of every flat element from Poplar's per-tile interval list, checking
    that each element appears exactly once."""
    tiles = np.full(n, -1)
    for tile, intervals in enumerate(mapping):
        for begin, end in intervals:
            assert 0 <= begin < end <= n
            assert np.all(tiles[begin:end] == -1), "element mapped twice"
            tiles[begin:end] = tile
    return tiles


# ---- variables and constants ----
def test_add_variable_and_constant():
    g = new_graph()
    v = g.add_variable("half", 5, "v")
    assert v.shape == (5,) and v.dtype is poplar.HALF
    c = g.add_constant(poplar.INT, (2, 3), [1, 2, 3], "c")
    info = g.state.variables[-1]
    assert info.name == "c" and info.is_constant and info.shape == (2, 3)
    np.testing.assert_array_equal(info.constant, [1, 2, 3, 1, 2, 3])
    assert info.constant.dtype == np.int32
    g.add_constant(poplar.FLOAT, (2, 2), 1.5)
    np.testing.assert_array_equal(g.state.variables[-1].constant, [1.5] * 4)
    assert not c.intersects_with(g.add_variable(poplar.INT, (2, 3), "w"))


def test_bad_variables_and_constants():
    g = new_graph()
    with pytest.raises(
        GraphError, match=re.escape("value of shape (2,) does not broadcast to (2, 3)")
    ):
        g.add_constant(poplar.FLOAT, (2, 3), [1.0, 2.0], "k")
    with pytest.raises(GraphError, match=re.escape("add_variable 'bad': invalid shape (2, -1)")):
        g.add_variable(poplar.FLOAT, (2, -1), "bad")
    with pytest.raises(GraphError, match="mapping 'cyclic' unknown"):
        g.add_variable(poplar.FLOAT, 3, "m", mapping="cyclic")
    with pytest.raises(GraphError, match="unknown element type 'quad'"):
        g.add_variable("quad", 3)


def test_replication_factor():
    with pytest.raises(GraphError, match="replication_factor must be a positive integer, got 0"):
        poplar.Graph(ipu2(tiles_per_ipu=4), replication_factor=0)
    with pytest.raises(GraphError, match=r"replication_factor 3 does not divide .* 4 IPUs"):
        new_graph(ipus=4, replicas=3)
    g = new_graph(ipus=4, replicas=2)
    assert g.replication_factor == 2 and g.num_tiles == 8 and g.target.num_ipus == 2


def test_clone_copies_type_shape_and_mapping():
    g = new_graph()
    x = g.add_variable(poplar.FLOAT, (3, 4), "x")
    g.set_tile_mapping(x, np.arange(12).reshape(3, 4) % 4)
    for src in (x, x.T, x[::2]):
        y = g.clone(src, "y")
        assert y.shape == src.shape and y.dtype is src.dtype and not y.intersects_with(x)
        np.testing.assert_array_equal(g.tiles_of(y), g.tiles_of(src))
    unmapped = g.clone(g.add_variable(poplar.FLOAT, 3, "u"))
    np.testing.assert_array_equal(g.tiles_of(unmapped), [-1, -1, -1])


# ---- tile mapping ----
def test_set_tile_mapping_forms():
    g = new_graph()
    t = g.add_variable(poplar.FLOAT, (2, 3), "t")
    g.set_tile_mapping(t, 2)
    assert g.get_tile_mapping(t) == [[], [], [(0, 6)], []]
    g.set_tile_mapping(t, np.array([[3, 3, 0], [0, 1, 3]]))
    assert g.get_tile_mapping(t) == [[(2, 4)], [(4, 5)], [], [(0, 2), (5, 6)]]
    g.set_tile_mapping(t, [[(0, 1), (4, 6)], [], [(1, 4)]])
    np.testing.assert_array_equal(g.tiles_of(t), [[0, 2, 2], [2, 0, 0]])
    g.set_tile_mapping(t.T, np.array([[1, 1], [2, 2], [3, 3]]))  # through a view
    np.testing.assert_array_equal(g.tiles_of(t), [[1, 2, 3], [1, 2, 3]])
    assert g.get_tile_mapping(t.T) == [[], [(0, 2)], [(2, 4)], [(4, 6)]]


def test_incomplete_mapping():
    g = new_graph()
    t = g.add_variable(poplar.FLOAT, 4, "t")
    g.set_tile_mapping(t[1:3], 1)
    np.testing.assert_array_equal(g.tiles_of(t), [-1, 1, 1, -1])
    with pytest.raises(GraphError, match=r"element 0 \(flat index\) is not mapped"):
        g.get_tile_mapping(t)
    assert g.get_tile_mapping(t, check_complete=False) == [[], [(1, 3)], [], []]


@SETTINGS
@given(
    data=st.data(),
    tiles=st.integers(1, 9),
    shape=npst.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=6),
)
def test_mapping_round_trip(data, tiles, shape):
    g = new_graph(tiles)
    t = g.add_variable(poplar.FLOAT, shape, "t")
    per_element = data.draw(npst.arrays(np.int64, shape, elements=st.integers(0, tiles - 1)))
    g.set_tile_mapping(t, per_element)
    mapping = g.get_tile_mapping(t)
    assert len(mapping) == tiles
    np.testing.assert_array_equal(
        per_element_tiles(mapping, t.num_elements), per_element.reshape(-1)
    )
    for intervals in mapping:  # sorted, and adjacent runs of one tile are merged
        assert all(e1 < b2 for (_, e1), (b2, _) in itertools.pairwise(intervals))
    g.set_tile_mapping(t, mapping)  # the interval form maps back to the same tiles
    np.testing.assert_array_equal(g.tiles_of(t), per_element)


@pytest.mark.parametrize("mapping", [4, -1, np.array([[0, 0, 4], [0, 0, 0]])])
def test_tile_past_the_target(mapping):
    g = new_graph()
    t = g.add_variable(poplar.FLOAT, (2, 3), "t")
    bad = mapping if isinstance(mapping, int) else 4
    with pytest.raises(GraphError, match=rf"tile {bad} is out of range: this graph has 4 tiles"):
        g.set_tile_mapping(t, mapping)


def test_bad_interval_mappings():
    g = new_graph()
    t = g.add_variable(poplar.FLOAT, (2, 3), "t")
    with pytest.raises(GraphError, match="mapping lists 5 tiles, graph has 4"):
        g.set_tile_mapping(t, [[], [], [], [], [(0, 6)]])
    with pytest.raises(
        GraphError, match=re.escape("interval [4, 7) on tile 1 outside the tensor's 6 elements")
    ):
        g.set_tile_mapping(t, [[], [(4, 7)]])


def test_tile_array_needs_one_entry_per_element():
    g = new_graph()
    t = g.add_variable(poplar.FLOAT, (2, 2), "t")
    with pytest.raises(GraphError, match=r"one entry per element \(4\), got shape \(5,\)"):
        g.set_tile_mapping(t, np.zeros(5, dtype=int))
    g.set_tile_mapping(t, np.array([3, 2, 1, 0]))  # flat, in the tensor's row-major order
    np.testing.assert_array_equal(g.tiles_of(t), [[3, 2], [1, 0]])


@pytest.mark.parametrize("view", ["whole", "transposed", "slice"])
def test_first_unmapped_is_the_first_negative_tile(view):
    """``first_unmapped``: the first flat element ``tiles_of`` gives a negative tile (not
    mapped, or below a virtual graph's tiles), read from the table in place."""
    g = new_graph(8)
    v = g.create_virtual_graph(2, 5)
    x = g.add_variable(poplar.FLOAT, (3, 4), "x")
    t = {"whole": x, "transposed": x.transpose(), "slice": x[1:]}[view]
    for graph in (g, v):
        assert graph.first_unmapped(t) == int(np.flatnonzero(graph.tiles_of(t) < 0)[0])
    g.set_tile_mapping(x, np.array([3] * 6 + [1] + [4] * 5))  # tile 1: below v's tiles
    for graph in (g, v):
        below = np.flatnonzero(graph.tiles_of(t).reshape(-1) < 0)
        assert graph.first_unmapped(t) == (int(below[0]) if below.size else None)
    assert g.first_unmapped(t) is None and v.first_unmapped(t) is not None


# ---- virtual graphs ----
def test_virtual_graph_numbers_tiles_from_its_lower_tile():
    g = new_graph(8)
    v = g.create_virtual_graph(2, 5)
    assert v.num_tiles == 3 and v.tile_range == (2, 5) and v.target.num_tiles == 3
    x = v.add_variable(poplar.FLOAT, 6, "x")
    v.set_tile_mapping(x, [[(0, 2)], [], [(2, 6)]])
    np.testing.assert_array_equal(g.tiles_of(x), [2, 2, 4, 4, 4, 4])
    np.testing.assert_array_equal(v.tiles_of(x), [0, 0, 2, 2, 2, 2])
    assert v.get_tile_mapping(x) == [[(0, 2)], [], [(2, 6)]]
    assert g.get_tile_mapping(x)[2] == [(0, 2)] and g.get_tile_mapping(x)[4] == [(2, 6)]
    inner = v.create_virtual_graph(1, 3)  # nested: tile 0 is tile 3 of the top graph
    inner.set_tile_mapping(x, 0)
    np.testing.assert_array_equal(g.tiles_of(x), [3] * 6)
    with pytest.raises(GraphError, match=r"tile 3 is out of range: this graph has 3 tiles"):
        v.set_tile_mapping(x, 3)
    with pytest.raises(GraphError, match=re.escape("tiles [4, 9) outside this graph's 8 tiles")):
        g.create_virtual_graph(4, 9)


def test_get_ipu_graph():
    g = poplar.Graph(poplar.IPUModel(tiles_per_ipu=4, num_ipus=2).create_device().target)
    assert g.num_tiles == 8
    second = g.get_ipu_graph(1)
    assert second.tile_range == (4, 8)
    assert second.target.num_ipus == 1 and second.target.tiles_per_ipu == 4
    x = second.add_variable(poplar.FLOAT, 2, "x")
    second.set_tile_mapping(x, 0)
    np.testing.assert_array_equal(g.tiles_of(x), [4, 4])
    with pytest.raises(GraphError, match=r"IPU 2 outside this graph's 2 IPU\(s\)"):
        g.get_ipu_graph(2)


# ---- streams, remote buffers, host handles, host functions ----
def test_handles():
    g = new_graph()
    t = g.add_variable(poplar.FLOAT, 4, "t")
    s = g.add_host_to_device_fifo("in", poplar.FLOAT, 4, replication_mode="broadcast")
    assert (s.name, s.dtype, s.num_elements, s.is_host_to_device) == ("in", poplar.FLOAT, 4, True)
    assert s.replication_mode == "broadcast"
    o = g.add_device_to_host_fifo("out", "half", 2)
    assert o.direction == "device_to_host" and o.dtype is poplar.HALF
    rb = g.add_remote_buffer("rb", poplar.INT, 3, repeats=5)
    assert (rb.num_elements, rb.repeats) == (3, 5)
    g.create_host_write("w", t)
    g.create_host_read("r", t)
    hf = g.add_host_function("cb", [("float", 4)], [(poplar.INT, 1)])
    assert hf.inputs[0].num_elements == 4 and hf.outputs[0].dtype is poplar.INT
    for name in ("in", "out", "rb", "w", "r", "cb"):  # one namespace for all handle kinds
        with pytest.raises(GraphError, match=f"handle name '{name}' is already used"):
            g.add_remote_buffer(name, poplar.FLOAT, 1)
        with pytest.raises(GraphError, match=f"handle name '{name}' is already used"):
            g.add_host_to_device_fifo(name, poplar.FLOAT, 1)
        with pytest.raises(GraphError, match=f"handle name '{name}' is already used"):
            g.create_host_read(name, t)
        with pytest.raises(GraphError, match=f"handle name '{name}' is already used"):
            g.add_host_function(name, [], [])


def test_bad_handles():
    g = new_graph()
    with pytest.raises(GraphError, match="must not be empty"):
        g.add_device_to_host_fifo("", poplar.FLOAT, 1)
    with pytest.raises(GraphError, match="stream 's': num_elements must be a positive integer"):
        g.add_host_to_device_fifo("s", poplar.FLOAT, 0)
    with pytest.raises(GraphError, match="replication_mode 'scatter' unknown"):
        g.add_host_to_device_fifo("s", poplar.FLOAT, 1, replication_mode="scatter")
    with pytest.raises(GraphError, match=r"remote buffer 'rb': .*repeats \(0\) must be positive"):
        g.add_remote_buffer("rb", poplar.FLOAT, 2, repeats=0)
    with pytest.raises(GraphError, match="belongs to another graph"):
        g.create_host_write("w", new_graph().add_variable(poplar.FLOAT, 1))


# ---- sizes (issue 15) ----
def test_a_variable_larger_than_the_whole_target_is_refused_before_allocation():
    """Refused from its size: nothing is added, and no per-element table is allocated
    (a 2**34-element variable would need 200 GB of host tables)."""
    import tracemalloc

    from tremula.errors import OutOfMemoryError

    g = poplar.Graph(poplar.IPUModel(tiles_per_ipu=4).create_target())
    w = g.add_variable(poplar.FLOAT, (1000,), "w")
    before = (len(g.state.variables), g.state.space(poplar.FLOAT).size, g.state.generation)
    tracemalloc.start()
    try:
        with pytest.raises(OutOfMemoryError) as err:
            g.add_variable(poplar.FLOAT, (2**17, 2**17), "huge")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    message = str(err.value)
    for part in (
        "'huge'",
        "(131072, 131072) float",
        "64.0 GiB",
        "all 4 tiles would overflow",
        "16.0 GiB each",
        "'w' 3.9 KiB",
    ):
        assert part in message, (part, message)
    assert (len(g.state.variables), g.state.space(poplar.FLOAT).size, g.state.generation) == before
    assert w.shape == (1000,)


def test_a_variable_one_byte_over_the_target_is_refused_and_one_that_fits_is_not():
    from tremula.errors import OutOfMemoryError

    tg = poplar.IPUModel(
        tiles_per_ipu=2,
        memory_bytes_per_tile=4096,
        memory_element_bytes=1024,
        interleaved_memory_element_index=2,
    )
    g = poplar.Graph(tg.create_target())
    g.add_variable(poplar.HALF, (4096,), "fits")  # 8192 B: the whole target
    with pytest.raises(OutOfMemoryError, match=r"add_variable 'over'.*8,196 B"):
        g.add_variable(poplar.FLOAT, (2049,), "over")
    with pytest.raises(OutOfMemoryError, match=r"add_constant 'c'"):
        g.add_constant(poplar.FLOAT, (64, 64), 1.0, "c")
    cpu = poplar.Graph(poplar.Device.create_cpu_device().target)
    cpu.add_variable(poplar.FLOAT, (2049,), "any")  # the CPU target has no tile limit


@pytest.mark.parametrize(
    ("shape", "match"),
    [
        ("abc", r"the shape must be a sequence of whole numbers, got str 'abc'"),
        (None, r"the shape .* got NoneType None"),
        (3.0, r"the shape .* got float 3.0"),
        ([2, "x"], r"invalid shape \(2, 'x'\): 'x' is not a whole number >= 0"),
        ([True], r"invalid shape \(True,\): True is not a whole number"),
        ([2.5], r"invalid shape \(2.5,\): 2.5 is not a whole number"),
    ],
)
def test_a_shape_that_is_not_whole_numbers_is_named(shape, match):
    g = poplar.Graph(ipu2(tiles_per_ipu=4))
    with pytest.raises(GraphError, match=r"add_variable 'v': " + match):
        g.add_variable(poplar.FLOAT, shape, "v")
    assert g.add_variable(poplar.FLOAT, [2.0, np.int64(3)], "w").shape == (2, 3)


def test_a_field_type_written_as_a_string_must_be_a_template():
    from tremula.errors import CodeletError

    class Untemplated(poplar.Codelet):
        name = "Untemplated"
        x = poplar.Input("float")

        @staticmethod
        def compute(v):
            pass

    g = poplar.Graph(ipu2(tiles_per_ipu=4))
    with pytest.raises(
        CodeletError,
        match=r"codelet 'Untemplated' field 'x': type 'float' is a "
        r"string, which names a template parameter.*write "
        r"poplar.FLOAT",
    ):
        g.add_codelets(Untemplated)
    assert "Untemplated" not in g.state.codelets
