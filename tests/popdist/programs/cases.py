"""PopXL programs run both in one process (``Ir(replication=4)``) and as the instances of a
PopRun job (``Ir(replication="popdist")``, 4 replicas over 2 or 4 instances); the test
compares the two bit for bit.

Each case builds a program, runs it, and returns *global* results: outputs of every replica
(an instance all-gathers its replicas' outputs with mpi4py) and ``get_tensor_data`` of its
variables (global by PopXL's rules: every instance gets the full tensor). Data are random
float32, so a reduction in another order would change the bits.

Run as a program (under poprun): ``cases.py OUTDIR [device]`` saves instance ``i``'s results
to ``OUTDIR/instance{i}.npz``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

import popdist
import popxl
from popxl import ops

C = ops.collectives
R = 4
RNG = np.random.default_rng(7)  # every instance draws the same global data
X = RNG.standard_normal((3, R, 5, 6)).astype(np.float32)  # [transfers, replica, ...]
V = RNG.standard_normal((R, 30)).astype(np.float32)
W = RNG.standard_normal((2, 7)).astype(np.float32)


def _ir() -> popxl.Ir:
    ir = popxl.Ir(replication="popdist" if popdist.isPopdistEnvSet() else R)
    assert ir.replication_factor == R
    return ir


def _local(arr: np.ndarray, axis: int, ir: popxl.Ir) -> np.ndarray:
    """This instance's replicas' part of global host data (the replica dim dropped for one
    replica, as PopXL does)."""
    L, off = ir.instance_replication_factor, popdist.getReplicaIndexOffset()
    part = np.take(arr, range(off, off + L), axis=axis)
    return part if L > 1 else np.squeeze(part, axis=axis)


def _global(arr: np.ndarray, axis: int, ir: popxl.Ir) -> np.ndarray:
    """Every replica's outputs from every instance's ``arr`` (replica dim at ``axis``)."""
    if ir.instance_replication_factor == R:
        return arr
    from mpi4py import MPI

    if ir.instance_replication_factor == 1:
        arr = np.expand_dims(arr, axis)
    parts = MPI.COMM_WORLD.allgather(arr)
    return np.concatenate(parts, axis=axis)


def collectives(device: str, report: Path | None = None) -> dict[str, np.ndarray]:
    """All-reduce, reduce-scatter, all-gather and replica-sharded slice over groupings
    within and across instances, fed by a host stream of 3 transfers (the profile written
    to ``report`` when given)."""
    ir = _ir()
    ir.num_host_transfers = 3
    groups = {
        "all": None,
        "pairs": ir.replica_grouping(group_size=2),  # {0,1},{2,3}
        "orth": ir.replica_grouping(stride=2, group_size=2),  # {0,2},{1,3}: spans instances
    }
    outs = {}
    with ir.main_graph:
        x_in = popxl.h2d_stream((5, 6), popxl.float32, "x")

        def body() -> None:
            x = ops.host_load(x_in)
            for gname, g in groups.items():
                made = {
                    "sum": C.replicated_all_reduce(x * 1.5 + 0.25, group=g),
                    "mean": C.replicated_all_reduce(x, op="mean", group=g),
                    "max": C.replicated_all_reduce(x, op="max", group=g),
                    "rs": C.replicated_reduce_scatter(x, group=g),
                    "ag": C.replicated_all_gather(x, group=g),
                    "slice": C.replica_sharded_slice(x, group=g),
                }
                for name, t in made.items():
                    key = f"{gname}_{name}"
                    if key not in outs:
                        outs[key] = popxl.d2h_stream(t.shape, t.dtype, key)
                    ops.host_store(outs[key], t)

        for _ in range(3):
            body()
    with popxl.Session(ir, device) as session:
        results = session.run({x_in: _local(X, 1, ir)})
    if report is not None:
        session.engine.write_report(str(report))
    return {s.tensor_id: _global(a, 1, ir) for s, a in results.items()}


def variables(device: str) -> dict[str, np.ndarray]:
    """Grouped on-chip variables (one_per_group, all_replicas), a remote variable and a
    replica-sharded variable over a grouping that spans instances, updated from collectives
    across instances; read back with get_tensor_data (global) and twice written."""
    ir = _ir()
    orth, pairs = ir.replica_grouping(stride=2, group_size=2), ir.replica_grouping(group_size=2)
    with ir.main_graph, popxl.in_sequence():  # the updates read what earlier ones wrote
        per = popxl.variable(V, name="per", replica_grouping=ir.replica_grouping(group_size=1))
        o = popxl.variable(V[:2], name="orth", replica_grouping=orth)
        a = popxl.variable(
            V[:2], name="allrep", replica_grouping=pairs, retrieval_mode="all_replicas"
        )
        buf = popxl.remote_buffer((30,), popxl.float32, entries=2)
        rem = popxl.remote_variable(V[:2], buf, 1, replica_grouping=orth)
        full, shard = popxl.replica_sharded_variable(
            V[:2], popxl.float32, "rts", replica_grouping=orth
        )
        loaded = ops.remote_load(buf, 1)
        ops.var_updates.accumulate_(per, C.replicated_all_reduce(per, group=orth))
        ops.var_updates.accumulate_(o, C.replicated_all_reduce(per * 0.5, group=pairs))
        ops.var_updates.accumulate_(a, C.replicated_all_reduce(per, op="mean"))
        ops.remote_store(buf, 1, loaded * 2.0 + C.replicated_all_reduce(loaded, group=pairs))
        gathered = C.replicated_all_gather(shard, group=orth)
        ops.var_updates.copy_var_update_(
            shard, C.replica_sharded_slice(gathered * 3.0 + 1.0, group=orth)
        )
    tensors = {"per": per, "orth": o, "allrep": a, "remote": rem, "rts": full}
    out = {}
    with popxl.Session(ir, device) as session:
        session.run()
        out.update({f"run1_{k}": session.get_tensor_data(t) for k, t in tensors.items()})
        session.write_variable_data(per, V * 2)
        session.run()
    out.update({f"run2_{k}": session.get_tensor_data(t) for k, t in tensors.items()})
    return out


def training(device: str) -> dict[str, np.ndarray]:
    """A data-parallel step: each replica's gradient of a linear layer, averaged over all
    replicas, updates the (shared) weight; 2 steps."""
    ir = _ir()
    with ir.main_graph:
        w = popxl.variable(W, name="w")
        x_in = popxl.h2d_stream((5, 2), popxl.float32, "x")
        x = ops.host_load(x_in)
        y = x @ w
        grad_w = ops.matmul(x.transpose(), y - 1.0)  # d/dw of 0.5 |x w - 1|^2
        grad_w = C.replicated_all_reduce(grad_w, op="mean")
        ops.var_updates.accumulate_(w, grad_w, -0.05)
    data = RNG.standard_normal((2, R, 5, 2)).astype(np.float32)
    with popxl.Session(ir, device) as session:
        for step in range(2):
            session.run({x_in: _local(data[step], 0, ir)})
    return {"w": session.get_tensor_data(w)}


def fragments(device: str) -> dict[str, np.ndarray]:
    """All-reduces of tensors large enough that every tile holds whole blocks of each chunk
    (reduced where they lie, only a remainder through a work buffer): in place on
    per-replica variables and into a new tensor, over groupings within and across
    instances; run twice. Always on the IPU Model: which elements share a chunk follows
    the target's tiles, so a float sum's last bits do too (the CPU target has one tile)."""
    del device
    ir = _ir()
    big = np.random.default_rng(11).standard_normal((3, R, 100_003)).astype(np.float32)
    groups = {
        "all": None,
        "pairs": ir.replica_grouping(group_size=2),
        "orth": ir.replica_grouping(stride=2, group_size=2),
    }
    each = ir.replica_grouping(group_size=1)
    made = {}
    with ir.main_graph, popxl.in_sequence():  # the max reads what the all-reduce_ wrote
        for k, (gname, g) in enumerate(groups.items()):
            made[gname] = popxl.variable(big[k], name=f"big_{gname}", replica_grouping=each)
            C.replicated_all_reduce_(made[gname], group=g)
        made["out"] = popxl.variable(big[0], name="big_out", replica_grouping=each)
        ops.var_updates.accumulate_(
            made["out"], C.replicated_all_reduce(made["pairs"], op="max", group=groups["orth"])
        )
    with popxl.Session(ir, "ipu_model") as session:
        session.run()
        session.run()
    return {name: session.get_tensor_data(v) for name, v in made.items()}


CASES: dict[str, Callable[[str], dict[str, np.ndarray]]] = {
    "collectives": collectives,
    "variables": variables,
    "training": training,
    "fragments": fragments,
}


def run_all(device: str = "ipu_model", report: Path | None = None) -> dict[str, np.ndarray]:
    out = {f"collectives/{k}": v for k, v in collectives(device, report).items()}
    for name, case in CASES.items():
        if name != "collectives":
            out.update({f"{name}/{k}": v for k, v in case(device).items()})
    return out


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    device = sys.argv[2] if len(sys.argv) > 2 else "ipu_model"
    i = popdist.getInstanceIndex()
    results = run_all(device, folder / f"profile{i}")
    np.savez(folder / f"instance{i}.npz", **results)
