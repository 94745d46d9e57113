"""poprand: bad input raises PoprandError naming the values, and leaves the graph as it was."""

from __future__ import annotations

import numpy as np
import pytest

from tremula import poplar
from tremula.errors import GraphError
from tremula.libs import poprand
from tremula.profile import validate


@pytest.fixture
def g():
    graph = poplar.Graph(poplar.IPUModel(tiles_per_ipu=4).create_device().target)
    graph.ref = graph.add_variable(poplar.FLOAT, (3, 4), "ref")
    poplar.map_tensor_linearly(graph, graph.ref)
    graph.seed = graph.add_variable(poplar.UNSIGNED_INT, (2,), "seed")
    graph.set_tile_mapping(graph.seed, 0)
    return graph


def _check(g, match, call):
    before = (g.state.generation, len(g.state.variables), len(g.state.compute_sets))
    prog = poplar.Sequence()
    with pytest.raises(poprand.PoprandError, match=match) as err:
        call(prog)
    assert isinstance(err.value, GraphError)
    assert (g.state.generation, len(g.state.variables), len(g.state.compute_sets)) == before
    assert prog.programs == []


def test_min_above_max(g):
    _check(
        g,
        r"min_val \(3\.5\) must not exceed max_val \(1\.0\)",
        lambda p: poprand.uniform(g, g.seed, 0, g.ref, "float", 3.5, 1.0, p),
    )
    _check(
        g,
        r"min_val \(4\.0\) must not exceed max_val \(2\.0\)",
        lambda p: poprand.log_uniform(g, g.seed, 0, g.ref, "half", 4, 2, p),
    )


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_probability_outside_0_1(g, bad):
    _check(
        g,
        rf"prob must (lie in \[0, 1\]|be finite), got {bad}",
        lambda p: poprand.bernoulli(g, g.seed, 0, g.ref, "float", bad, p),
    )
    _check(
        g,
        rf"keep_probability must (lie in \[0, 1\]|be finite), got {bad}",
        lambda p: poprand.dropout(g, g.seed, 0, g.ref, None, bad, 1.0, p),
    )


@pytest.mark.parametrize(
    "dtype,shape,match",
    [
        (poplar.INT, (2,), "type int and shape \\(2,\\)"),
        (poplar.UNSIGNED_INT, (3,), "type unsigned int and shape \\(3,\\)"),
        (poplar.UNSIGNED_INT, (1, 2), "shape \\(1, 2\\)"),
    ],
)
def test_bad_seed_tensor(g, dtype, shape, match):
    seed = g.add_variable(dtype, shape, "bad_seed")
    _check(g, match, lambda p: poprand.normal(g, seed, 0, g.ref, "float", 0, 1, p))


def test_seed_not_a_tensor_or_of_another_graph(g):
    _check(
        g,
        "seed must be a poplar.Tensor, got tuple",
        lambda p: poprand.uniform(g, (1, 2), 0, g.ref, "float", 0, 1, p),
    )
    other = poplar.Graph(g.get_target())
    foreign = other.add_variable(poplar.UNSIGNED_INT, (2,), "s")
    _check(
        g,
        "seed .* belongs to another graph",
        lambda p: poprand.uniform(g, foreign, 0, g.ref, "float", 0, 1, p),
    )


@pytest.mark.parametrize("bad", [-1, 2**32, 1.5, True])
def test_bad_seed_modifier(g, bad):
    _check(
        g,
        rf"seed_modifier must be an unsigned 32-bit integer .*got {bad!r}",
        lambda p: poprand.uniform(g, g.seed, bad, g.ref, "float", 0, 1, p),
    )


def test_bad_types(g):
    _check(
        g,
        "dtype must be one of float, half; got poplar.INT",
        lambda p: poprand.normal(g, g.seed, 0, g.ref, poplar.INT, 0, 1, p),
    )
    _check(
        g,
        "dtype must be one of float, half, int; got 'complex'",
        lambda p: poprand.uniform(g, g.seed, 0, g.ref, "complex", 0, 1, p),
    )
    x = g.add_variable(poplar.INT, (3, 4), "xi")
    _check(
        g,
        "input type must be one of float, half; got poplar.INT",
        lambda p: poprand.dropout(g, g.seed, 0, x, None, 0.5, 2.0, p),
    )


def test_bad_parameters(g):
    _check(
        g,
        r"min_val must be a 32-bit integer for an int output, got 0\.5",
        lambda p: poprand.uniform(g, g.seed, 0, g.ref, "int", 0.5, 3, p),
    )
    _check(
        g,
        r"max_val must be a 32-bit integer .* got 4294967296",
        lambda p: poprand.uniform(g, g.seed, 0, g.ref, "int", 0, 2**32, p),
    )
    _check(
        g,
        r"max_val 100000\.0 is not representable as half",
        lambda p: poprand.uniform(g, g.seed, 0, g.ref, "half", 0, 1e5, p),
    )
    _check(
        g,
        "min_val must be finite, got -inf",
        lambda p: poprand.uniform(g, g.seed, 0, g.ref, "float", -np.inf, 1, p),
    )
    _check(
        g,
        r"stdev must be >= 0, got -2",
        lambda p: poprand.normal(g, g.seed, 0, g.ref, "float", 0, -2, p),
    )
    _check(
        g,
        r"alpha must be > 0, got 0",
        lambda p: poprand.truncated_normal(g, g.seed, 0, g.ref, "float", 0, 1, 0, p),
    )
    _check(
        g,
        r"min_val must be positive, got 0",
        lambda p: poprand.log_uniform(g, g.seed, 0, g.ref, "float", 0, 1, p),
    )
    _check(
        g,
        r"base must be positive and not 1, got 1",
        lambda p: poprand.log_uniform(g, g.seed, 0, g.ref, "float", 1, 2, p, base=1),
    )
    _check(
        g,
        "scale must be a number, got 'x'",
        lambda p: poprand.dropout(g, g.seed, 0, g.ref, None, 0.5, "x", p),
    )


def test_bad_reference_and_prog(g):
    other = g.add_variable(poplar.FLOAT, (4, 3), "other")
    poplar.map_tensor_linearly(g, other)
    _check(
        g,
        r"reference shape \(4, 3\) differs from input shape \(3, 4\)",
        lambda p: poprand.dropout(g, g.seed, 0, g.ref, other, 0.5, 2.0, p),
    )
    unmapped = g.add_variable(poplar.FLOAT, (5,), "unmapped")
    _check(
        g,
        r"element 0 \(flat\) of reference .* is not mapped",
        lambda p: poprand.uniform(g, g.seed, 0, unmapped, "float", 0, 1, p),
    )
    _check(
        g,
        "reference must be a poplar.Tensor, got ndarray",
        lambda p: poprand.uniform(g, g.seed, 0, np.zeros(3), "float", 0, 1, p),
    )
    with pytest.raises(poprand.PoprandError, match=r"prog must be a poplar\.Sequence, got list"):
        poprand.uniform(g, g.seed, 0, g.ref, "float", 0, 1, [])


def test_empty_reference_gives_an_empty_tensor(g):
    empty = g.add_variable(poplar.FLOAT, (0, 3), "empty")
    prog = poplar.Sequence()
    out = poprand.uniform(g, g.seed, 0, empty, "float", 0, 1, prog)
    assert out.shape == (0, 3) and prog.programs == []


def test_a_replica_alone_in_a_branch_draws_its_own_numbers():
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    g = poplar.Graph(device.target, replication_factor=2)
    pred = g.add_variable(poplar.INT, (1,), "pred")
    g.set_tile_mapping(pred, 0)
    g.create_host_write("pred", pred)
    ref = g.add_variable(poplar.FLOAT, (8,), "ref")
    poplar.map_tensor_linearly(g, ref)
    body = poplar.Sequence()
    out = poprand.uniform(g, None, 0, ref, "float", 0, 1, body)
    g.create_host_read("out", out)
    engine = poplar.Engine(g, poplar.If(pred, body))
    engine.load(device)
    engine.write_tensor("pred", np.array([[1], [1]], np.int32))
    engine.run(0)
    together = engine.read_tensor("out")
    assert not np.array_equal(together[0], together[1])  # replicas draw different numbers
    engine.write_tensor("pred", np.array([[0], [1]], np.int32))  # only replica 1 runs
    engine.run(0)
    np.testing.assert_array_equal(engine.read_tensor("out")[1], together[1])
    validate(engine.get_graph_profile(), engine.get_execution_profile())
