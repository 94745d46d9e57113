"""Gradients of the collectives over replicas, as PopART's grad ops define them (spec
popxl-fidelity.md section 5): all-gather -> each replica's own slice of its gradient (no
summing); replicated slice and "local" reduce-scatter -> all-gather of the gradients;
``replicated_all_reduce`` has no grad op (no gradient passes through it); a reduce-scatter
with any other op refuses a gradient with ``popart_exception``."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import popart
import popxl
import popxl.ops as ops

C = ops.collectives
R = 2
Fn = Callable[[popxl.Tensor], popxl.Tensor]


def _per_replica(ir: popxl.Ir, data: np.ndarray, name: str) -> popxl.Variable:
    return popxl.variable(data, replica_grouping=ir.replica_grouping(group_size=1), name=name)


def _grads(fns: dict[str, Fn], x: np.ndarray, rng: np.random.Generator) -> tuple[dict, dict]:
    """Each function's gradient of ``x`` (per replica, ``[R, *x.shape]``) for a random
    per-replica seed of its output, and the seeds."""
    ir = popxl.Ir(replication=R)
    seeds, streams = {}, {}
    with ir.main_graph:
        xv = _per_replica(ir, x, "x")
        for name, fn in fns.items():
            fwd = ir.create_graph(fn, xv)
            out = fwd.outputs[0]
            seeds[name] = rng.uniform(-1, 1, (R, *out.shape)).astype(np.float32)
            info = popxl.transforms.autodiff(fwd)
            site = ops.call_with_info(fwd, xv)
            g = _per_replica(ir, seeds[name], f"seed_{name}")
            (gx,) = ops.call(info.graph, g, inputs_dict=info.inputs_dict(site))
            streams[name] = popxl.d2h_stream(gx.shape, gx.dtype, name=name)
            ops.host_store(streams[name], gx)
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run()
    return {name: out[s] for name, s in streams.items()}, seeds


def test_collective_gradients_follow_popart() -> None:
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (R, 4, 2)).astype(np.float32)
    fns: dict[str, Fn] = {
        "all_gather": lambda t: C.replicated_all_gather(t, 1, output_shape="concat"),
        "all_gather_new_axis": lambda t: C.replicated_all_gather(t, output_shape="new_axis"),
        "local_reduce_scatter": lambda t: C.replica_sharded_slice(t),
        "slice": lambda t: C.replicated_slice(t, 0),
    }
    got, s = _grads(fns, x, rng)
    own = np.stack([np.split(s["all_gather"][r], R, axis=1)[r] for r in range(R)])
    np.testing.assert_array_equal(got["all_gather"], own)
    own = np.stack([s["all_gather_new_axis"][r, r] for r in range(R)])
    np.testing.assert_array_equal(got["all_gather_new_axis"], own)
    gathered = np.concatenate(list(s["local_reduce_scatter"])).reshape(4, 2)
    np.testing.assert_array_equal(got["local_reduce_scatter"], np.stack([gathered] * R))
    sliced = np.concatenate(list(s["slice"]), axis=0)
    np.testing.assert_array_equal(got["slice"], np.stack([sliced] * R))


def _all_reduce_inplace(t: popxl.Tensor) -> popxl.Tensor:
    return C.replicated_all_reduce_(t * 1.0, "add")  # in place on an intermediate


def test_replicated_all_reduce_passes_no_gradient() -> None:
    """PopART's ReplicatedAllReduceOp has no grad op: nothing flows back through it (nor its
    in-place form), so the gradient of ``x`` is what reaches it by other paths (zeros when
    none does), and the grad graph holds no collective."""
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (R, 3)).astype(np.float32)
    fns: dict[str, Fn] = {
        "alone": lambda t: C.replicated_all_reduce(t, "add"),
        "mean": lambda t: C.replicated_all_reduce(t, "mean"),
        "inplace": _all_reduce_inplace,
        "beside": lambda t: C.replicated_all_reduce(t, "add") + t * 3.0,
    }
    got, s = _grads(fns, x, rng)
    for name in ("alone", "mean", "inplace"):
        np.testing.assert_array_equal(got[name], np.zeros((R, 3), np.float32), err_msg=name)
    np.testing.assert_allclose(got["beside"], 3.0 * s["beside"], rtol=1e-6)

    ir = popxl.Ir(replication=R)
    with ir.main_graph:
        xv = _per_replica(ir, x, "x")
    fwd = ir.create_graph(fns["beside"], xv)
    info = popxl.transforms.autodiff(fwd)
    assert not [op for op in info.graph.ops if "Replicated" in op.type], info.graph.ops


@pytest.mark.parametrize("op", ["add", "mean"])
def test_reduce_scatter_gradient_only_for_local(op: str) -> None:
    """A reduce-scatter that reduces refuses a gradient with ``popart_exception``, as
    ``ReplicatedReduceScatterOp::getGradOps``; the Ir is left as it was."""
    ir = popxl.Ir(replication=R)
    with ir.main_graph:
        xv = _per_replica(ir, np.ones((R, 4), np.float32), "x")
    fwd = ir.create_graph(lambda t: C.replicated_reduce_scatter(t, op), xv)
    graphs_before = [g.name for g in ir.graphs]
    ops_before = list(fwd.ops)
    with pytest.raises(popart.popart_exception, match="Cannot create grad op for Replicated"):
        popxl.transforms.autodiff(fwd)
    assert list(fwd.ops) == ops_before
    assert [g.name for g in ir.graphs] == graphs_before
