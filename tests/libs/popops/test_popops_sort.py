"""popops.sort / sort_key_value / top_k against NumPy: every dimension, ties, NaN, several
types, and bad input."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from tremula.errors import GraphError
from tremula.libs.popops.sort import sort, sort_key_value, top_k


def _helpers():
    name = "tremula_tests_popops_reduce_helpers"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).with_name("test_popops_reduce_helpers.py")
        )
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


H = _helpers()
Rig, graph_size = H.Rig, H.graph_size
RNG = np.random.default_rng(3)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.uint32])
def test_sort_along_every_dimension(dtype) -> None:
    rig = Rig(tiles=16)
    x = RNG.integers(0, 6, (6, 7, 9)).astype(dtype)  # many ties
    t = rig.input(x)
    outs = [sort(rig.graph, t, d, rig.prog, name=f"s{d}") for d in range(3)]
    for d, got in enumerate(rig.run(outs)):
        np.testing.assert_array_equal(got, np.sort(x, axis=d))


def test_sort_puts_nan_last_and_keeps_the_mapping() -> None:
    rig = Rig(tiles=4)
    x = np.array([[3.0, np.nan, -np.inf, 1.0], [np.nan, 2.0, 2.0, -1.0]], np.float32)
    t = rig.input(x)
    out = sort(rig.graph, t, 1, rig.prog)
    np.testing.assert_array_equal(rig.graph.tiles_of(out), rig.graph.tiles_of(t))
    (got,) = rig.run([out])
    np.testing.assert_array_equal(got, np.sort(x, axis=1))


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_sort_key_value_is_stable(dim: int) -> None:
    rig = Rig(tiles=16)
    keys = RNG.integers(0, 3, (5, 6, 8)).astype(np.int32)
    values = RNG.standard_normal((5, 6, 8)).astype(np.float32)
    out = sort_key_value(rig.graph, rig.input(keys), rig.input(values), dim, rig.prog)
    (got,) = rig.run([out])
    order = np.argsort(keys, axis=dim, kind="stable")
    np.testing.assert_array_equal(got, np.take_along_axis(values, order, axis=dim))


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint32, np.float16])
def test_top_k_with_ties_takes_the_lower_index(largest: bool, dtype) -> None:
    rig = Rig(tiles=16)
    x = RNG.integers(0, 4, (5, 4, 11)).astype(dtype)
    vals, idx = top_k(rig.graph, rig.input(x), 4, rig.prog, largest=largest)
    got_v, got_i = rig.run([vals, idx])
    key = -x.astype(np.float64) if largest else x
    order = np.argsort(key, axis=-1, kind="stable")[..., :4]
    assert got_i.dtype == np.uint32 and got_v.dtype == dtype
    np.testing.assert_array_equal(got_i, order)
    np.testing.assert_array_equal(got_v, np.take_along_axis(x, order, axis=-1))


def test_top_k_of_a_vector_with_nan() -> None:
    rig = Rig(tiles=2)
    x = np.array([1.0, np.nan, 5.0, -2.0, 5.0], np.float32)
    vals, idx = top_k(rig.graph, rig.input(x), 5, rig.prog)
    got_v, got_i = rig.run([vals, idx])
    np.testing.assert_array_equal(got_i, [2, 4, 0, 3, 1])
    np.testing.assert_array_equal(got_v, [5.0, 5.0, 1.0, -2.0, np.nan])


def test_bad_input_names_the_problem_and_leaves_the_graph() -> None:
    rig = Rig(tiles=4)
    g = rig.graph
    x = rig.input(np.zeros((3, 4), np.float32))
    y = rig.input(np.zeros((4, 3), np.float32))
    b = rig.input(np.zeros((3, 4), bool))
    before = graph_size(g)
    cases = [
        (lambda: sort(g, x, 2, rig.prog), "dim 2 is out of range for a tensor of rank 2"),
        (lambda: sort(g, b, 0, rig.prog), "cannot sort a bool tensor"),
        (lambda: sort_key_value(g, x, y, 0, rig.prog), "differ in shape"),
        (lambda: top_k(g, x, 5, rig.prog), "k=5 must be an integer in 1..4"),
        (lambda: top_k(g, x, 0, rig.prog), "k=0 must be an integer in 1..4"),
        (lambda: top_k(g, b, 1, rig.prog), "non-bool tensor"),
    ]
    for call, message in cases:
        with pytest.raises(GraphError) as err:
            call()
        assert message in str(err.value)
    assert graph_size(g) == before
