"""Round 9 probe of the errors PopXL's ops raise before they add anything: the input
checks of ``popxl.ops.utils`` (``check_in_graph``, ``check_tensor_ipu_and_tile_set``).

Stands for the ``pytest.raises(..., match=...)`` cases of PopXL's
tests/unittests/python/popxl/ops/test_*.py (the ``*_different_graph`` / ``*_different_ipus``
style cases), tests/unittests/python/popxl/test_context.py and test_graph.py.

What PopXL does, as pinned here (confidence from memory of popxl/ops/*.py):
- each op function calls ``check_in_graph(g, <arg>=<tensor>, ...)`` with its own argument
  names, so the message names the argument (`t`, `lhs`, `rhs`, `indices`, `ts_1`), not the
  tensor's id (~85 %; ``ts_{i}`` for concat's list ~70 %);
- concat, where, gather, scatter and dynamic_slice / dynamic_update call
  ``check_tensor_ipu_and_tile_set`` on their tensor inputs, as the binary ops and matmul do
  (~75 %);
- a refused op leaves the graph as it was (no stray cast or constant).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import popxl
import popxl.ops as ops


def _counts(g: popxl.Graph) -> tuple[int, int]:
    return len(g._pb_graph.getOpIds()), len(g._pb_graph.getTensorIds())


# op function, the argument PopXL's check_in_graph names for the main graph's tensor ``m``
# (float32 (2, 2)) or ``mi`` (int32 (2,)) / ``mu`` (uint32 (1,)); ``x`` / ``xi`` are the
# subgraph's own inputs
OTHER_GRAPH: list[tuple[str, Callable[..., Any], str]] = [
    ("relu", lambda x, xi, m, mi, mu: ops.relu(m), "t"),
    ("add lhs", lambda x, xi, m, mi, mu: ops.add(m, x), "lhs"),
    ("add rhs", lambda x, xi, m, mi, mu: ops.add(x, m), "rhs"),
    ("operator", lambda x, xi, m, mi, mu: x * m, "rhs"),
    ("matmul", lambda x, xi, m, mi, mu: ops.matmul(x, m), "rhs"),
    ("cast", lambda x, xi, m, mi, mu: ops.cast(m, popxl.int32), "t"),
    ("gather t", lambda x, xi, m, mi, mu: ops.gather(m, xi), "t"),
    ("gather indices", lambda x, xi, m, mi, mu: ops.gather(x, mi), "indices"),
    ("where", lambda x, xi, m, mi, mu: None, "rhs"),  # below: its condition is made first
    ("concat", lambda x, xi, m, mi, mu: ops.concat([x, m]), "ts_1"),
    ("dynamic_slice", lambda x, xi, m, mi, mu: ops.dynamic_slice(x, mu, [0], [1]), "index"),
    ("softmax", lambda x, xi, m, mi, mu: ops.softmax(m, 0), "t"),
]


@pytest.mark.parametrize("case, fn, arg", OTHER_GRAPH, ids=[c[0] for c in OTHER_GRAPH])
def test_a_tensor_of_another_graph_is_named_by_the_ops_argument(
    case: str, fn: Callable[..., Any], arg: str
) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        m = popxl.variable(np.ones((2, 2), np.float32), name="m")
        mi = popxl.variable(np.zeros(2, np.int32), name="mi")
        mu = popxl.variable(np.zeros(1, np.uint32), name="mu")
    sub = ir.create_empty_graph("sub")
    with sub:
        x = popxl.graph_input((2, 2), popxl.float32, "x")
        xi = popxl.graph_input((2,), popxl.int32, "xi")
        cond = ops.greater(x, x) if case == "where" else None
        before = _counts(sub)
        message = rf"^The input tensor `{arg}` is not in the current Graph sub_subgraph\(0\)\."
        with pytest.raises(ValueError, match=message) as info:
            if case == "where":
                ops.where(cond, x, m)
            else:
                fn(x, xi, m, mi, mu)
        assert _counts(sub) == before  # nothing added
    assert "belongs to graph 'main_graph'" in str(info.value)


def test_a_tensor_of_another_ir_is_named_by_the_ops_argument() -> None:
    first, second = popxl.Ir(), popxl.Ir()
    with first.main_graph:
        a = popxl.variable(np.ones(2, np.float32), name="a")
    with second.main_graph:
        b = popxl.variable(np.ones(2, np.float32), name="b")
        before = _counts(second.main_graph)
        with pytest.raises(ValueError, match=r"^The input tensor `rhs` is not in the current"):
            ops.sub(b, a)
        with pytest.raises(ValueError, match=r"^The input tensor `lhs` is not in the current"):
            _ = a + 1  # the constant for 1 is not made either
        assert _counts(second.main_graph) == before


def test_a_non_tensor_in_concats_list_is_named_as_popxl_names_it() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones((2, 2), np.float32), name="a")
        with pytest.raises(TypeError, match=r"^The input `ts_1` is not a Tensor\. Type: <class"):
            ops.concat([a, [[1.0, 2.0]]])
        assert _counts(ir.main_graph)[0] == 0


def _on_two_ipus() -> tuple[popxl.Ir, dict[str, popxl.Tensor]]:
    """Tensors made by ops on IPU 0 (``x``, ``i``, ``c``) and IPU 1 (``y``, ``j``)."""
    ir = popxl.Ir()
    got: dict[str, popxl.Tensor] = {}
    with ir.main_graph:
        with popxl.ipu(0):
            got["x"] = ops.relu(popxl.variable(np.ones((2, 2), np.float32)))
            got["i"] = ops.abs(popxl.variable(np.array([[0, 1]], np.int32)))
            got["c"] = ops.greater(got["x"], got["x"])
            got["u"] = ops.abs(popxl.variable(np.zeros(1, np.int32)))
        with popxl.ipu(1):
            got["y"] = ops.relu(popxl.variable(np.ones((2, 2), np.float32)))
            got["j"] = ops.abs(popxl.variable(np.array([[0, 1]], np.int32)))
            got["z"] = ops.relu(popxl.variable(np.ones((1, 2), np.float32)))
            got["f"] = ops.relu(popxl.variable(np.ones((2, 2), np.float32)))
    return ir, got


PLACED: list[tuple[str, Callable[[dict[str, popxl.Tensor]], Any], str]] = [
    ("concat", lambda t: ops.concat([t["x"], t["y"]]), "`ts_0` and `ts_1`"),
    ("where", lambda t: ops.where(t["c"], t["x"], t["y"]), "`condition` and `rhs`"),
    ("where non-bool", lambda t: ops.where(t["f"], t["x"], 0.0), "`condition` and `lhs`"),
    ("gather", lambda t: ops.gather(t["x"], t["j"]), "`t` and `indices`"),
    ("scatter", lambda t: ops.scatter(t["x"], t["i"], t["z"]), "`t` and `values`"),
    (
        "dynamic_update",
        lambda t: ops.dynamic_update(t["x"], ops.cast(t["u"], popxl.uint32), t["z"], [0], [1]),
        "`t` and `t_update`",
    ),
]


@pytest.mark.parametrize("case, fn, names", PLACED, ids=[c[0] for c in PLACED])
def test_ops_refuse_inputs_on_different_ipus(
    case: str, fn: Callable[[dict[str, popxl.Tensor]], Any], names: str
) -> None:
    ir, t = _on_two_ipus()
    with ir.main_graph, popxl.ipu(0):
        if case == "dynamic_update":
            t["u"] = ops.cast(t["u"], popxl.uint32)
            fn = lambda t: ops.dynamic_update(t["x"], t["u"], t["z"], [0], [1])  # noqa: E731
        before = _counts(ir.main_graph)
        with pytest.raises(ValueError, match=rf"^Tensors {names} are located on different IPUs"):
            fn(t)
        assert _counts(ir.main_graph) == before  # no stray cast (where's condition) or op


def test_concat_refuses_inputs_on_different_tile_sets() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.relu(popxl.variable(np.ones(2, np.float32)))
        with popxl.io_tiles():
            y = ops.relu(popxl.variable(np.ones(2, np.float32)))
        before = _counts(ir.main_graph)
        with pytest.raises(ValueError, match=r"located on different tile sets: compute != io"):
            ops.concat([x, y])
        assert _counts(ir.main_graph) == before
        # copied to the compute tiles, they concatenate: the IR has the Concat, of shape (4,)
        assert ops.concat([x, ops.io_tile_copy(y)]).shape == (4,)


def test_gather_with_host_indices_and_a_bad_axis_adds_no_constant() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones((2, 3), np.float32), name="a")
        before = _counts(ir.main_graph)
        with pytest.raises(ValueError, match="axis 5 is out of range for 'a'"):
            ops.gather(a, [0, 1], axis=5)
        with pytest.raises(ValueError, match="axis 5 is out of range for 'a'"):
            ops.scatter(a, [[0, 0, 0]], a[0:1], axis=5)
        assert _counts(ir.main_graph)[0] == before[0] + 1  # the slice a[0:1] only
        assert _counts(ir.main_graph)[1] == before[1] + 1


def test_placed_ops_still_run_when_on_one_ipu() -> None:
    """The placement checks do not refuse what PopXL accepts: on one IPU, the values match
    NumPy."""
    ir = popxl.Ir()
    xs = np.arange(6, dtype=np.float32).reshape(2, 3)
    with ir.main_graph, popxl.ipu(0):
        x = popxl.variable(xs, name="x")
        idx = popxl.constant(np.array([1, 0], np.int32))
        g = ops.gather(ops.relu(x), idx)
        w = ops.where(ops.greater(x, popxl.constant(2.0)), x, -x)
        c = ops.concat([g, w], axis=1)
        out = popxl.d2h_stream(c.shape, c.dtype, "out")
        ops.host_store(out, c)
    with popxl.Session(ir, "ipu_model") as s:
        got = s.run()[out]
    want = np.concatenate([xs[[1, 0]], np.where(xs > 2, xs, -xs)], axis=1)
    np.testing.assert_array_equal(got, want)
