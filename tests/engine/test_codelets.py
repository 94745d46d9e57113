"""Codelets as the engine runs them: batched compute over vertex groups of several types,
vector lists, supervisor vertices, per-vertex reductions and fields on other tiles."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tremula_tests_engine_codelets import make_engine, new_graph, var

from tremula import poplar


def _sums(lengths):
    """Per-vertex Sum of consecutive segments of one variable, against NumPy."""
    g, dev = new_graph()
    x = var(g, max(sum(lengths), 1), tile=None, write="x")
    s = var(g, len(lengths), tile=None, read="s")
    off = np.cumsum([0, *lengths])
    cs = g.add_compute_set("sums")
    g.add_vertices(
        cs,
        "Sum<float>",
        {
            "x": [x[off[i] : off[i + 1]] for i in range(len(lengths))],
            "out": [s[i] for i in range(len(lengths))],
        },
        tiles=[0] * len(lengths),
    )
    e = make_engine(g, poplar.Execute(cs), device=dev)
    data = np.arange(1, x.num_elements + 1, dtype=np.float32) ** 2
    e.write_tensor("x", data)
    e.run()
    want = [data[off[i] : off[i + 1]].sum() for i in range(len(lengths))]
    np.testing.assert_array_equal(e.read_tensor("s"), want)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=6))
def test_per_vertex_sums_match_numpy(lengths):
    _sums(lengths)


@pytest.mark.parametrize("lengths", [[0, 3], [3, 0, 2], [0, 0, 4]])
def test_per_vertex_sums_with_empty_vertices(lengths):
    _sums(lengths)


@pytest.mark.parametrize("lengths", [[3, 0], [2, 0, 0]])
def test_per_vertex_sums_with_trailing_empty_vertices(lengths):
    _sums(lengths)


def test_vector_list_with_an_empty_list_in_the_middle():
    g, dev = new_graph()
    a, b = var(g, 2, write="a"), var(g, 3, tile=0, write="b")
    o = var(g, 3, tile=0, read="o")
    cs = g.add_compute_set()
    g.add_vertices(
        cs, "ListSum<float>", {"xs": [[a], [], [b, a]], "out": [o[0], o[1], o[2]]}, tiles=[0, 0, 0]
    )
    e = make_engine(g, poplar.Execute(cs), device=dev)
    e.write_tensor("a", [1, 2])
    e.write_tensor("b", [10, 20, 40])
    e.run()
    np.testing.assert_array_equal(e.read_tensor("o"), [3, 0, 73])


def test_vector_list_with_an_empty_last_list():
    g, dev = new_graph()
    a = var(g, 2, write="a")
    o = var(g, 2, tile=0, read="o")
    cs = g.add_compute_set()
    g.add_vertices(cs, "ListSum<float>", {"xs": [[a], []], "out": [o[0], o[1]]}, tiles=[0, 0])
    e = make_engine(g, poplar.Execute(cs), device=dev)
    e.write_tensor("a", [1, 2])
    e.run()
    np.testing.assert_array_equal(e.read_tensor("o"), [3, 0])


def test_fields_on_other_tiles_are_exchanged_before_and_after():
    g, dev = new_graph()
    x = var(g, 4, tile=0, write="x")
    y = var(g, 4, tile=3, read="y")
    cs = g.add_compute_set("remote")
    g.add_vertex(cs, "Scale<float>", {"x": x, "y": y, "a": 0.5}, tile=1)
    e = make_engine(g, poplar.Execute(cs), device=dev)
    e.write_tensor("x", [2, 4, 6, 8])
    e.run()
    np.testing.assert_array_equal(e.read_tensor("y"), [1, 2, 3, 4])
    graph = e.get_graph_profile()
    ex = graph["exchanges"]
    assert ex["bytesSentByTile"] == [[16, 0, 0, 0], [0, 16, 0, 0]]  # pre, then post
    assert ex["bytesReceivedByTile"] == [[0, 16, 0, 0], [0, 0, 0, 16]]
    kinds = [s["type"] for s in e.get_execution_profile()["simulation"]["steps"]]
    assert kinds == ["Sync", "DoExchange", "OnTileExecute", "Sync", "DoExchange"]


def test_replicated_compute_sees_every_replica():
    g, dev = new_graph(replicas=3)
    x = var(g, (4, 2), tile=None, write="x")
    s = var(g, 4, tile=None, read="s")
    cs = g.add_compute_set()
    g.add_vertices(cs, "Sum<float>", {"x": x, "out": [s[i] for i in range(4)]}, tiles=range(4))
    e = make_engine(g, poplar.Execute(cs), device=dev)
    data = np.arange(24, dtype=np.float32).reshape(3, 4, 2)
    e.write_tensor("x", data)
    e.run()
    np.testing.assert_array_equal(e.read_tensor("s"), data.sum(axis=2))


def test_vector_list_and_supervisor_codelets():
    g, dev = new_graph()
    a, b = var(g, 3, tile=0, write="a"), var(g, 5, tile=1, write="b")
    out = var(g, (), tile=0, read="out")
    y = var(g, 5, tile=1, read="y")
    cs = g.add_compute_set("both")
    g.add_vertex(cs, "ListSum<float>", {"xs": [a, b[1:4]], "out": out}, tile=0)
    g.add_vertex(cs, "SupScale<float>", {"x": b, "y": y, "a": -2.0}, tile=1)
    e = make_engine(g, poplar.Execute(cs), device=dev)
    av, bv = np.array([1, 2, 3], np.float32), np.array([10, 20, 30, 40, 50], np.float32)
    e.write_tensor("a", av)
    e.write_tensor("b", bv)
    e.run()
    assert e.read_tensor("out") == av.sum() + bv[1:4].sum()
    np.testing.assert_array_equal(e.read_tensor("y"), -2 * bv)
