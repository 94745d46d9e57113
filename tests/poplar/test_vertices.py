"""Vertices (``add_vertex``, bulk ``add_vertices``, ``connect``) and ``Graph.verify``."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tremula import poplar
from tremula.errors import CodeletError, GraphError, VerifyError
from tremula.poplar import Codelet, InOut, Input, Output, State
from tremula.target import ipu2

SETTINGS = settings(max_examples=60, deadline=None)


class Scale(Codelet):
    x = Input("T")
    y = Output("T")
    a = State(poplar.FLOAT)
    templates = ("T",)


class Sum(Codelet):
    xs = Input(poplar.FLOAT, kind="vector_list")
    s = Output(poplar.FLOAT, kind="scalar")


class Bump(Codelet):
    x = InOut(poplar.INT)
    n = State(poplar.INT, default=3)


def new_graph() -> poplar.Graph:
    g = poplar.Graph(ipu2(tiles_per_ipu=4))
    g.add_codelets([Scale, Sum, Bump])
    return g


def mapped(g: poplar.Graph, shape, name: str, dtype=poplar.FLOAT) -> poplar.Tensor:
    return g.add_variable(dtype, shape, name, mapping="linear")


@pytest.mark.parametrize(
    ("vertex_type", "fields", "message"),
    [
        ("Scale<float>", {"x": "x0", "z": "y0"}, "vertex 'Scale<float>': unknown field(s) ['z']"),
        (
            "Scale<float>",
            {"x": "h"},
            "vertex 'Scale<float>' field 'x': expected type float, got tensor of type half",
        ),
        (
            "Sum",
            {"xs": ["x0"], "s": "s2"},
            "vertex 'Sum' field 's': expected 1 element(s) (scalar), got 2",
        ),
        ("Scale<float>", {"a": [1.0, 2.0]}, "vertex 'Scale<float>' field 'a': bad state value"),
        ("Nope", {}, "vertex type 'Nope': no codelet 'Nope' registered"),
        ("Scale", {}, "vertex type 'Scale': codelet 'Scale' takes 1 template argument(s)"),
        ("Scale<float,half>", {}, "codelet 'Scale' takes 1 template argument(s) ('T',), got 2"),
        ("Scale<quad>", {}, "unknown element type 'quad'"),
    ],
)
def test_bad_vertices_raise_codelet_error(vertex_type, fields, message):
    g = new_graph()
    tensors = {
        "x0": mapped(g, 3, "x0"),
        "y0": mapped(g, 3, "y0"),
        "h": mapped(g, 3, "h", poplar.HALF),
        "s2": mapped(g, 2, "s2"),
    }
    fields = {
        k: [tensors.get(i, i) for i in v] if isinstance(v, list) else tensors.get(v, v)
        for k, v in fields.items()
    }
    with pytest.raises(GraphError, match=re.escape(message)) as info:
        g.add_vertex(g.add_compute_set("cs"), vertex_type, fields, tile=0)
    if vertex_type != "Scale<quad>":
        assert isinstance(info.value, CodeletError)


def test_vertex_tile_and_compute_set_checks():
    g = new_graph()
    x, y = mapped(g, 3, "x"), mapped(g, 3, "y")
    cs = g.add_compute_set("cs")
    with pytest.raises(GraphError, match=r"tile 9 is out of range: this graph has 4 tiles"):
        g.add_vertex(cs, "Scale<float>", {"x": x, "y": y, "a": 1.0}, tile=9)
    with pytest.raises(GraphError, match="is not a compute set of this graph"):
        g.add_vertex(new_graph().add_compute_set("other"), "Scale<float>", {})
    v = g.add_vertex(cs, "Scale<float>", {"x": x, "y": y, "a": 1.0})
    with pytest.raises(GraphError, match="tile 4 is out of range"):
        g.set_tile_mapping(v, 4)
    g.set_tile_mapping(v, 3)
    g.verify()


def group(g: poplar.Graph, cs: poplar.ComputeSet):
    return g.state.vertex_groups[cs.id][-1]


def test_add_vertices_with_leading_vertex_dimension():
    g = new_graph()
    x, y = mapped(g, (4, 3), "x"), mapped(g, (4, 3), "y")
    cs = g.add_compute_set("cs")
    vs = g.add_vertices(cs, "Scale<float>", {"x": x.T.T, "y": y, "a": [1, 2, 3, 4]}, [0, 1, 2, 3])
    assert [v.index for v in vs] == [0, 1, 2, 3] and vs[0]["x"].name == "x"
    gr = group(g, cs)
    np.testing.assert_array_equal(gr.edges["x"].lengths, [3, 3, 3, 3])
    np.testing.assert_array_equal(gr.edges["x"].addresses, x.addresses.reshape(-1))
    np.testing.assert_array_equal(gr.state["a"], [1, 2, 3, 4])
    np.testing.assert_array_equal(gr.tiles, [0, 1, 2, 3])
    g.verify()
    with pytest.raises(
        CodeletError,
        match=r"field 'x': bulk connection needs a leading "
        r"dimension of 3 \(one row per vertex\), got shape \(4, 3\)",
    ):
        g.add_vertices(g.add_compute_set(), "Scale<float>", {"x": x}, [0, 1, 2])


def test_add_vertices_returns_handles_made_on_demand():
    """The handles of a bulk group behave as a sequence of Vertex values: indices (also
    negative), slices, iteration; an index past the group names it."""
    g = new_graph()
    x, y = mapped(g, (4, 3), "x"), mapped(g, (4, 3), "y")
    cs = g.add_compute_set("cs")
    vs = g.add_vertices(cs, "Scale<float>", {"x": x, "y": y, "a": 1.0}, [0, 1, 2, 3])
    assert isinstance(vs, poplar.Vertices) and len(vs) == 4
    assert [v.index for v in vs] == [0, 1, 2, 3] == [v.index for v in vs[:]]
    assert vs[-1].index == 3 and [v.index for v in vs[1::2]] == [1, 3]
    assert {(v.compute_set, v.group, v.type_name) for v in vs} == {(cs, 0, "Scale<float>")}
    with pytest.raises(IndexError, match=r"vertex 4 of a group of 4 Scale<float> .*'cs'"):
        vs[4]
    g.set_perf_estimate(vs[-1], 7)  # a handle made later names the same vertex
    assert group(g, cs).perf_estimates[3] == 7


def test_add_vertices_with_ragged_lists():
    g = new_graph()
    x, y = mapped(g, (2, 3), "x"), mapped(g, (2, 3), "y")
    cs = g.add_compute_set("cs")
    g.add_vertices(
        cs, "Scale<float>", {"x": [x[0], x[1, :2]], "y": [y[0], y[1, 1:]], "a": 2.0}, [1, 2]
    )
    gr = group(g, cs)
    np.testing.assert_array_equal(gr.edges["y"].lengths, [3, 2])
    np.testing.assert_array_equal(gr.edges["y"].addresses, y.addresses.reshape(-1)[[0, 1, 2, 4, 5]])
    np.testing.assert_array_equal(gr.state["a"], [2.0, 2.0])
    g.verify()
    with pytest.raises(CodeletError, match="field 'x': 1 tensors for 2 vertices"):
        g.add_vertices(g.add_compute_set(), "Scale<float>", {"x": [x[0]]}, [0, 1])


def test_add_vertices_with_vector_lists():
    g = new_graph()
    x, s = mapped(g, (3, 2), "x"), mapped(g, 3, "s")
    cs = g.add_compute_set("cs")
    g.add_vertices(
        cs, "Sum", {"xs": [[x[0], x[1]], [], [x[2, :1]]], "s": [s[0], s[1], s[2]]}, [0, 1, 2]
    )
    conn = group(g, cs).edges["xs"]
    np.testing.assert_array_equal(conn.lengths, [4, 0, 1])
    np.testing.assert_array_equal(conn.sub_lengths, [2, 2, 1])
    np.testing.assert_array_equal(conn.sub_counts, [2, 0, 1])
    np.testing.assert_array_equal(conn.addresses, x.addresses.reshape(-1)[:5])
    g.verify()


def test_add_vertices_vector_list_last_empty():
    g = new_graph()
    x, s = mapped(g, (3, 2), "x"), mapped(g, 3, "s")
    cs = g.add_compute_set("cs")
    g.add_vertices(
        cs, "Sum", {"xs": [[x[0], x[1]], [x[2]], []], "s": [s[0], s[1], s[2]]}, [0, 1, 2]
    )
    np.testing.assert_array_equal(group(g, cs).edges["xs"].lengths, [4, 2, 0])


def test_state_defaults_and_connect():
    g = new_graph()
    i = mapped(g, 4, "i", poplar.INT)
    cs = g.add_compute_set("cs")
    g.add_vertices(cs, "Bump", {"x": i.reshape((2, 2))}, [0, 1])
    np.testing.assert_array_equal(group(g, cs).state["n"], [3, 3])
    x, y = mapped(g, 3, "x"), mapped(g, 3, "y")
    v = g.add_vertex(cs, "Scale<float>", tile=2)
    g.connect(v["x"], x)
    g.connect(v["y"], y)
    g.set_initial_value(v["a"], 0.5)
    assert group(g, cs).state["a"][0] == 0.5
    g.verify()
    with pytest.raises(CodeletError, match="vertex 'Scale<float>' has no field 'w'"):
        g.connect(v["w"], x)


# ---- verify ----
def test_verify_passes_on_a_good_graph():
    g = new_graph()
    x, y = mapped(g, (4, 3), "x"), mapped(g, (4, 3), "y")
    g.set_tile_mapping(g.add_constant(poplar.INT, (), 7, "seven"), 1)
    g.add_variable(poplar.FLOAT, (0, 3), "empty")  # nothing to map
    g.add_vertices(
        g.add_compute_set("fwd"), "Scale<float>", {"x": x, "y": y, "a": 1.0}, [0, 1, 2, 3]
    )
    g.add_vertices(
        g.add_compute_set("bwd"), "Scale<float>", {"x": y, "y": x, "a": 1.0}, [0, 1, 2, 3]
    )
    g.verify()


def broken_graphs():
    """(graph builder, message pattern) of each problem verify must catch."""

    def unmapped_variable(g):
        g.add_variable(poplar.FLOAT, (2, 3), "lonely")
        g.set_tile_mapping(g.add_variable(poplar.FLOAT, 2, "fine"), 0)

    def unmapped_constant(g):
        g.add_constant(poplar.FLOAT, 3, 1.0, "k")

    def unmapped_vertex(g):
        g.add_vertex(
            g.add_compute_set("step"),
            "Scale<float>",
            {"x": mapped(g, 3, "x"), "y": mapped(g, 3, "y"), "a": 1},
        )

    def unconnected(g):
        g.add_vertex(
            g.add_compute_set("step"), "Scale<float>", {"x": mapped(g, 3, "x"), "a": 1}, tile=0
        )

    def no_state(g):
        g.add_vertex(
            g.add_compute_set("step"),
            "Scale<float>",
            {"x": mapped(g, 3, "x"), "y": mapped(g, 3, "y")},
            tile=0,
        )

    def two_writers(g):
        x, y, cs = mapped(g, 4, "x"), mapped(g, 4, "y"), g.add_compute_set("step")
        g.add_vertex(cs, "Scale<float>", {"x": x[:2], "y": y[:3], "a": 1}, tile=0)
        g.add_vertex(cs, "Scale<float>", {"x": x[2:], "y": y[2:], "a": 1}, tile=1)

    def read_and_write(g):
        x, y, cs = mapped(g, 4, "x"), mapped(g, 4, "y"), g.add_compute_set("step")
        g.add_vertex(cs, "Scale<float>", {"x": x[:2], "y": y[:2], "a": 1}, tile=0)
        g.add_vertex(cs, "Scale<float>", {"x": y[1:3], "y": x[2:], "a": 1}, tile=1)

    return [
        (unmapped_variable, r"variable 'lonely' \[2, 3\]: 6 of 6 elements not mapped"),
        (unmapped_constant, r"constant 'k' \[3\]: 3 of 3 elements not mapped"),
        (
            unmapped_vertex,
            r"compute set 'step': 1 vertex\(es\) of type 'Scale<float>' not "
            r"mapped to a tile",
        ),
        (unconnected, r"compute set 'step': vertex 'Scale<float>' field 'y' is not connected"),
        (no_state, r"compute set 'step': vertex 'Scale<float>' state 'a' has no value"),
        (two_writers, r"compute set 'step' writes element 2 of 'y' from more than one vertex"),
        (read_and_write, r"compute set 'step' reads and writes one region: element 1 of 'y'"),
    ]


@pytest.mark.parametrize(
    ("build", "message"), broken_graphs(), ids=[b.__name__ for b, _ in broken_graphs()]
)
def test_verify_catches(build, message):
    g = new_graph()
    build(g)
    with pytest.raises(VerifyError, match=message):
        g.verify()


@SETTINGS
@given(data=st.data(), n=st.integers(1, 12), vertices=st.integers(1, 4))
def test_verify_conflicts_match_an_element_count(data, n, vertices):
    """Each vertex reads and writes arbitrary elements of one variable; verify must flag the
    compute set exactly when an element is written twice or both read and written."""
    g = new_graph()
    v = mapped(g, n, "v")
    cs = g.add_compute_set("step")
    # an owner per element (-1: none) makes disjoint writes likely; a few draws break that
    owner = np.array(data.draw(st.lists(st.integers(-1, vertices - 1), min_size=n, max_size=n)))
    free = np.flatnonzero(owner < 0).tolist()
    anything = st.integers(0, n - 1)
    writes, reads = np.zeros(n, int), np.zeros(n, int)
    for i in range(vertices):
        w = np.flatnonzero(owner == i).tolist() or [data.draw(anything, label="stray write")]
        w = np.array(data.draw(st.permutations(w), label="writes"))
        element = st.sampled_from(free) if free and data.draw(st.booleans()) else anything
        r = np.array(data.draw(st.lists(element, min_size=1, max_size=5), label="reads"))
        np.add.at(reads, r, 1)
        np.add.at(writes, w, 1)
        g.add_vertex(cs, "Scale<float>", {"x": v[r], "y": v[w], "a": 1.0}, tile=i)
    twice = np.flatnonzero(writes > 1)
    both = np.flatnonzero((writes > 0) & (reads > 0))
    clean = twice.size == 0 and both.size == 0
    event("clean" if clean else "conflict")
    if clean:
        g.verify()
        return
    with pytest.raises(VerifyError, match="compute set 'step'") as info:
        g.verify()
    element = int(re.search(r"element (\d+) of 'v'", str(info.value)).group(1))
    assert element in (twice if twice.size else both)


def test_template_arguments_keep_inner_spaces():
    from tremula.poplar.codelet import parse_vertex_type

    assert parse_vertex_type("ns::V<unsigned int, float>") == ("ns::V", ("unsigned int", "float"))
    assert parse_vertex_type(" ns::V< ADD ,half> ") == ("ns::V", ("ADD", "half"))
    assert parse_vertex_type("Plain") == ("Plain", ())


def test_affine_connections_stay_compact():
    """A bulk connection to a view of one variable keeps its layout: runs come from the
    strides, and no per-element address array is built until something asks for it."""
    from tremula.poplar.addresses import AddressList

    g = poplar.Graph(poplar.IPUModel(tiles_per_ipu=4).create_device().target)
    a = g.add_variable(poplar.FLOAT, (6, 8), "a")
    view = a.reshape((3, 2, 8)).dim_shuffle([1, 0, 2]).expand([0]).broadcast(5, 0)  # stride 0
    addrs = AddressList(view.addresses, g.state.address_roots)
    assert addrs.layout is not None and addrs._flat is None
    starts, lengths = addrs.runs()
    assert addrs._flat is None  # derived from the layout alone
    flat = view.addresses.reshape(-1)
    np.testing.assert_array_equal(
        np.repeat(starts, lengths)
        + (np.arange(flat.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)),
        flat,
    )
    assert starts.size == 5 * 2 * 3  # one run per row of 8 (rows 0,2,4 / 1,3,5 not adjacent)
    np.testing.assert_array_equal(addrs.flat(), flat)


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    perm_seed=st.integers(0, 1000),
    broadcast=st.integers(1, 3),
)
def test_strided_layout_runs_are_those_of_the_addresses(shape, perm_seed, broadcast):
    """A view whose last axis does not step by one (a transpose, a broadcast) has
    one-element runs but for pairs joined across an axis's end: found from the layout,
    they are the runs of its addresses; its bounds come from the layout too."""
    from tremula.poplar.addresses import AddressList
    from tremula.poplar.intervals import runs

    g = poplar.Graph(poplar.IPUModel(tiles_per_ipu=4).create_device().target)
    a = g.add_variable(poplar.FLOAT, tuple(shape), "a")
    order = np.random.default_rng(perm_seed).permutation(len(shape)).tolist()
    view = a.dim_shuffle(order).expand([0]).broadcast(broadcast, 0)
    if perm_seed % 3 == 0:  # a negative stride
        view = view.reverse(len(shape))
    addrs = AddressList(view.addresses, g.state.address_roots)
    assert addrs.bounds() == (int(view.addresses.min()), int(view.addresses.max()) + 1)
    starts, lengths = addrs.runs()
    want_starts, want_ends = runs(view.addresses.reshape(-1))
    np.testing.assert_array_equal(starts, want_starts)
    np.testing.assert_array_equal(lengths, want_ends - want_starts)
