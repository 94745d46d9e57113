"""popops.histogram against NumPy: bin edges, NaN, absolute values, levels as a tensor or
numbers, several types, the partial histograms' reduction, and bad input."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from tremula.errors import GraphError
from tremula.libs.popops.histogram import histogram


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
RNG = np.random.default_rng(5)


def expected(x: np.ndarray, levels, absolute: bool = False) -> np.ndarray:
    x = np.abs(x) if absolute else x
    bins = np.searchsorted(np.asarray(levels, x.dtype), x.reshape(-1), side="right")
    return np.bincount(bins, minlength=len(levels) + 1).astype(np.float32)


@pytest.mark.parametrize("absolute", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_histogram_edges_and_nan(absolute: bool, dtype) -> None:
    rig = H.Rig(tiles=16)
    levels = [-1.0, 0.0, 0.5, 2.0]
    x = RNG.standard_normal((33, 17)).astype(dtype)
    x[0, :5] = [-1.0, 0.0, 0.5, 2.0, -2.0]  # values on the levels go to the upper bin
    x[1, 0] = np.nan  # counts in the last bin
    out = histogram(rig.graph, rig.input(x), levels, rig.prog, absolute_of_data=absolute)
    assert rig.compute_sets("histogram/sum/ReduceStage")  # partial histograms are reduced
    (got,) = rig.run([out])
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expected(x, levels, absolute))
    assert got.sum() == x.size


def test_histogram_with_a_levels_tensor_of_ints() -> None:
    rig = H.Rig(tiles=4)
    x = RNG.integers(-10, 10, 500).astype(np.int32)
    lv = rig.input(np.array([-5, 0, 0, 7], np.int32))
    (got,) = rig.run([histogram(rig.graph, rig.input(x), lv, rig.prog)])
    np.testing.assert_array_equal(got, expected(x, [-5, 0, 0, 7]))


def test_histogram_of_levels_that_differ_between_replicas_of_a_run() -> None:
    rig = H.Rig(tiles=4)
    x = RNG.standard_normal(300).astype(np.float32)
    lv = rig.input(np.array([-0.5, 0.5], np.float32))
    out = histogram(rig.graph, rig.input(x), lv, rig.prog)
    for levels in ([-0.5, 0.5], [0.0, 3.0]):
        rig.feeds["in0"] = np.array(levels, np.float32)
        (got,) = rig.run([out])
        np.testing.assert_array_equal(got, expected(x, levels))


def test_bad_input() -> None:
    rig = H.Rig(tiles=2)
    g = rig.graph
    x = rig.input(np.zeros(8, np.float32))
    b = rig.input(np.zeros(8, bool))
    lv_int = rig.input(np.zeros(2, np.int32))
    before = H.graph_size(g)
    for data, levels, message in [
        (x, [1.0, 0.0], "levels must ascend"),
        (x, [[0.0]], "levels must be one-dimensional"),
        (x, lv_int, "levels must be a rank-1 tensor of type float, got int"),
        (b, [0.0], "data must be float, half or integer, got bool"),
    ]:
        with pytest.raises(GraphError, match=message):
            histogram(g, data, levels, rig.prog)
    assert H.graph_size(g) == before
