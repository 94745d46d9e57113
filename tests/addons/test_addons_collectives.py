"""popxl-addons' strided and tensor-parallel collectives (C++ custom ops in popxl-addons,
served by Tremula in Python: tremula/popxl/_ir/native.py) over replica groupings with a
stride, against NumPy;
its other C++ custom ops are refused by name."""

from __future__ import annotations

import numpy as np
import popxl_addons  # noqa: F401  (imports the strided collectives, as users do)
import pytest
from popxl_addons.ops.replicated_all_reduce_TP import (
    replicated_all_reduce,
    replicated_all_reduce_identical_grad_inputs,
    replicated_all_reduce_identical_inputs,
)
from popxl_addons.ops.replicated_strided_collectives import (
    replicated_all_gather_strided,
    replicated_all_reduce_strided,
    replicated_all_reduce_strided_identical_grad_inputs,
    replicated_all_reduce_strided_identical_inputs,
    replicated_reduce_scatter_strided,
)

import popart
import popxl
from popxl import ops

R = 4
X = np.arange(R * 6, dtype=np.float32).reshape(R, 2, 3)  # one row per replica


def _run(build) -> np.ndarray:
    return _run_counting(build)[0]


def _run_counting(build) -> tuple[np.ndarray, int]:
    """The outputs of every replica, and how many exchanges between replicas ran (global
    exchange steps in the execution profile)."""
    ir = popxl.Ir(replication=R)
    with ir.main_graph:
        x = popxl.variable(X, name="x", replica_grouping=ir.replica_grouping(group_size=1))
        rg = ir.replica_grouping(stride=2, group_size=2)  # groups {0, 2} and {1, 3}
        out = build(x, rg)
        d2h = popxl.d2h_stream(out.shape, out.dtype)
        ops.host_store(d2h, out)
    with popxl.Session(ir, "ipu_model") as s:
        got = s.run()[d2h]
        steps = s.engine.get_execution_profile()["simulation"]["steps"]
    return got, sum(step["type"] == "GlobalExchange" for step in steps)


PARTNER = [2, 3, 0, 1]


def test_all_gather_strided() -> None:
    got = _run(lambda x, rg: replicated_all_gather_strided(x, group=rg))
    for r in range(R):
        first, second = sorted((r, PARTNER[r]))
        np.testing.assert_array_equal(got[r], np.concatenate([X[first].ravel(), X[second].ravel()]))


def test_reduce_scatter_strided() -> None:
    got = _run(lambda x, rg: replicated_reduce_scatter_strided(x, group=rg))
    for r in range(R):
        total = (X[r] + X[PARTNER[r]]).ravel()
        np.testing.assert_array_equal(got[r], total[:3] if r < 2 else total[3:])


AR = {  # (op, forward all-reduced, gradient all-reduced)
    "plain": (replicated_all_reduce_strided, True, True),
    "identical_grad_inputs": (replicated_all_reduce_strided_identical_grad_inputs, True, False),
    "identical_inputs": (replicated_all_reduce_strided_identical_inputs, False, True),
    "TP": (replicated_all_reduce, True, True),  # the tensor-parallel all-reduce
    "TP_identical_grad_inputs": (replicated_all_reduce_identical_grad_inputs, True, False),
    "TP_identical_inputs": (replicated_all_reduce_identical_inputs, False, True),
}


def _all_reduces(graph: popxl.Graph, kind: str) -> list[tuple[bool, bool]]:
    """The graph's ops must be one all-reduce of popxl-addons' op type (its own, as the C++
    op's identifier, not PopXL's ReplicatedAllReduce) and nothing else: its (identical
    inputs, identical gradient inputs) flags, the first lowered to a copy with no exchange."""
    op_type = "ReplicatedAllReduceTP" if kind.startswith("TP") else "ReplicatedAllReduceStrided"
    assert [op.type for op in graph.ops] == [op_type], graph.ops
    flags = graph.ops[0].attrs
    return [(flags.get("identical_inputs", False), flags.get("identical_grad_inputs", False))]


@pytest.mark.parametrize("kind", list(AR))
@pytest.mark.parametrize("grad", [False, True])
def test_all_reduce_strided_and_its_gradient(kind: str, grad: bool) -> None:
    """Results against NumPy; the forward graph is one all-reduce op carrying the flags (no
    second all-reduce standing in for the gradient) and exchanges between replicas only if
    it reduces, the gradient graph one all-reduce with the flags swapped (PopART's
    getGradOps)."""
    fn, fwd_reduces, grad_reduces = AR[kind]

    def build(x, rg):
        if not grad:
            return fn(x, group=rg)
        g = popxl.gcg().ir.create_graph(lambda t: fn(t, group=rg), x)
        info = popxl.transforms.autodiff(g)
        assert _all_reduces(g, kind) == [(not fwd_reduces, not grad_reduces)]
        assert _all_reduces(info.graph, kind) == [(not grad_reduces, not fwd_reduces)]
        call = ops.call_with_info(g, x)
        (dx,) = ops.call(info.graph, x * 2.0, inputs_dict=info.inputs_dict(call))
        return dx

    got, exchanges = _run_counting(build)
    reduces, scale = (grad_reduces, 2) if grad else (fwd_reduces, 1)
    if not grad:  # identical inputs: a copy, no exchange between replicas
        assert (exchanges > 0) == fwd_reduces
    for r in range(R):
        ref = scale * (X[r] + X[PARTNER[r]] if reduces else X[r])
        np.testing.assert_array_equal(got[r], ref)


def test_tp_all_reduce_takes_add_only() -> None:
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        x = popxl.variable(np.ones(3, np.float32))
        with pytest.raises(popart.popart_exception, match="Add is the only"):
            replicated_all_reduce(x, op="max")


def test_all_reduce_strided_mean_gradient() -> None:
    """The strided all-reduce with op "mean": its gradient is the mean all-reduce of the
    gradients (the C++ grad op keeps the op)."""

    def build(x, rg):
        g = popxl.gcg().ir.create_graph(
            lambda t: replicated_all_reduce_strided(t, group=rg, op="mean"), x
        )
        info = popxl.transforms.autodiff(g)
        call = ops.call_with_info(g, x)
        (dx,) = ops.call(info.graph, x * 2.0, inputs_dict=info.inputs_dict(call))
        return dx

    got = _run(build)
    for r in range(R):
        np.testing.assert_allclose(got[r], (X[r] + X[PARTNER[r]]), rtol=1e-6)


@pytest.mark.parametrize(
    "fn",
    [
        lambda t, rg: replicated_all_gather_strided(t, group=rg),
        lambda t, rg: replicated_reduce_scatter_strided(t, group=rg),
    ],
    ids=["all_gather", "reduce_scatter"],
)
def test_strided_gather_and_scatter_pass_no_gradient(fn) -> None:
    """popxl-addons' strided all-gather and reduce-scatter are ``CollectivesBaseOp``s without
    ``getGradOps``: no gradient passes through them (the input's gradient is zeros), unlike
    PopXL's all-gather (a local reduce-scatter) and its reduce-scatter (refused)."""

    def build(x, rg):
        g = popxl.gcg().ir.create_graph(lambda t: fn(t, rg), x)
        info = popxl.transforms.autodiff(g)
        assert not [op for op in info.graph.ops if "Replicated" in op.type], info.graph.ops
        call = ops.call_with_info(g, x)
        seed = popxl.constant(np.ones(g.outputs[0].shape, np.float32))
        (dx,) = ops.call(info.graph, seed, inputs_dict=info.inputs_dict(call))
        return dx

    got = _run(build)
    np.testing.assert_array_equal(got, np.zeros_like(X))
