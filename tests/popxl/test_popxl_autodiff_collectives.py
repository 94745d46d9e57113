"""Gradients of the collectives over replicas, as PopART defines them (spec 1.14): all-reduce
-> all-reduce of the gradients; all-gather -> each replica's own slice of its gradient (no
summing); reduce-scatter and replicated slice -> all-gather of the gradients."""

from __future__ import annotations

import numpy as np

import popxl
import popxl.ops as ops

C = ops.collectives
R = 2


def _per_replica(ir: popxl.Ir, data: np.ndarray, name: str) -> popxl.Variable:
    return popxl.variable(data, replica_grouping=ir.replica_grouping(group_size=1), name=name)


def test_collective_gradients_follow_popart() -> None:
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (R, 4, 2)).astype(np.float32)
    ir = popxl.Ir(replication=R)
    fns = {
        "all_reduce_add": lambda t: C.replicated_all_reduce(t, "add"),
        "all_reduce_mean": lambda t: C.replicated_all_reduce(t, "mean"),
        "all_gather": lambda t: C.replicated_all_gather(t, 1, output_shape="concat"),
        "all_gather_new_axis": lambda t: C.replicated_all_gather(t, output_shape="new_axis"),
        "reduce_scatter": lambda t: C.replicated_reduce_scatter(t, "add"),
        "slice": lambda t: C.replicated_slice(t, 0),
    }
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
    got = {name: out[s] for name, s in streams.items()}
    s = seeds
    total = s["all_reduce_add"].sum(0)
    np.testing.assert_allclose(got["all_reduce_add"], np.stack([total] * R), rtol=1e-6)
    mean = s["all_reduce_mean"].mean(0)
    np.testing.assert_allclose(got["all_reduce_mean"], np.stack([mean] * R), rtol=1e-6)
    own = np.stack([np.split(s["all_gather"][r], R, axis=1)[r] for r in range(R)])
    np.testing.assert_array_equal(got["all_gather"], own)
    own = np.stack([s["all_gather_new_axis"][r, r] for r in range(R)])
    np.testing.assert_array_equal(got["all_gather_new_axis"], own)
    gathered = np.concatenate(list(s["reduce_scatter"])).reshape(4, 2)
    np.testing.assert_array_equal(got["reduce_scatter"], np.stack([gathered] * R))
    sliced = np.concatenate(list(s["slice"]), axis=0)
    np.testing.assert_array_equal(got["slice"], np.stack([sliced] * R))
