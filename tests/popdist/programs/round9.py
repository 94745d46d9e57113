"""Round 9 probe (issue 26): what each instance of a PopRun job of several replicas per
instance (``poprun --num-replicas 8 --num-instances 4``) sees of a PopXL program, written
as JSON to ``OUTDIR/instance<i>.json`` for the test to compare against NumPy.

Checked there: the PopDist layout functions, the Ir's replication numbers and session
options, host-stream shapes (``[num_host_transfers, L, ...]``: only the local replicas),
``get_tensor_data`` of grouped / all_replicas / remote / sharded variables (global on every
instance), collectives over groupings that span instances, per-instance weights written
with ``write_variable_data`` (each instance's host copy, each replica from its owner) and a
non-constant grouping from ``replica_grouping_from_assignments``.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import numpy as np

import popdist
import popxl
from popxl import ops

C = ops.collectives
R = 8
V = np.arange(R * 3, dtype=np.float32).reshape(R, 3)
X = np.arange(2 * R * 3, dtype=np.float32).reshape(2, R, 3) * 10  # [transfer, replica, 3]


def main(folder: Path) -> None:
    popdist.init()
    out: dict[str, object] = {
        "layout": [
            popdist.isPopdistEnvSet(),
            popdist.getNumTotalReplicas(),
            popdist.getNumLocalReplicas(),
            popdist.getReplicaIndexOffset(),
            popdist.getNumInstances(),
            popdist.getInstanceIndex(),
            popdist.getNumIpusPerReplica(),
        ]
    }
    ir = popxl.Ir("popdist")  # positional, as PopXL's tests write it
    opts = ir._pb_ir.getSessionOptions()
    out["ir"] = [ir.replication_factor, ir.instance_replication_factor]
    out["opts"] = [
        opts.enableReplicatedGraphs,
        opts.replicatedGraphCount,
        opts.enableDistributedReplicatedGraphs,
        opts.globalReplicaOffset,
        opts.globalReplicationFactor,
    ]
    ir.num_host_transfers = 2
    L, off = ir.instance_replication_factor, popdist.getReplicaIndexOffset()
    with ir.main_graph, popxl.in_sequence():
        per = popxl.variable(V, name="per", replica_grouping=ir.replica_grouping(group_size=1))
        orth = ir.replica_grouping(stride=2, group_size=4)  # {0,2,4,6}, {1,3,5,7}
        pairs = ir.replica_grouping(stride=4, group_size=2)  # {0,4}, {1,5}, ...: 2 instances
        u = popxl.variable(V[:2], name="u", replica_grouping=orth)
        every = popxl.variable(V[:4], name="every", replica_grouping=pairs)
        odd = ir.replica_grouping_from_assignments([0, 1, 1, 0, 1, 0, 0, 1])
        byass = popxl.variable(V[:2], name="byass", replica_grouping=odd)
        full, shard = popxl.replica_sharded_variable(
            V[:2], popxl.float32, "rts", replica_grouping=orth, shard_over=2
        )
        halves = ir.replica_grouping(stride=2, group_size=2)  # {0,2}, {1,3}, {4,6}, {5,7}
        x_in = popxl.h2d_stream((3,), popxl.float32, "x")
        streams = {}
        for step in range(2):
            x = ops.host_load(x_in)
            made = {
                "sum": C.replicated_all_reduce(x),
                "orth_max": C.replicated_all_reduce(x, op="max", group=orth),
                "pairs_mean": C.replicated_all_reduce(x + per, op="mean", group=pairs),
                "gather_pairs": C.replicated_all_gather(x, group=pairs),
                "scatter": C.replicated_reduce_scatter(per, group=orth),
            }
            for name, t in made.items():
                if step == 0:
                    streams[name] = popxl.d2h_stream(t.shape, t.dtype, name)
                ops.host_store(streams[name], t)
            if step == 0:
                ops.var_updates.accumulate_(u, C.replicated_all_reduce(x, group=orth))
                ops.var_updates.accumulate_(every, x)
                ops.var_updates.accumulate_(byass, per)
                gathered = C.replicated_all_gather(shard, group=halves)
                ops.var_updates.copy_var_update_(
                    shard, C.replica_sharded_slice(gathered + 1.0, group=halves)
                )
    local = X[:, off : off + L]
    with popxl.Session(ir, "ipu_model") as session:
        outs = session.run({x_in: local})
        out["streams"] = {k: outs[s].tolist() for k, s in streams.items()}
        out["shapes"] = {k: list(outs[s].shape) for k, s in streams.items()}
        tensors = {"per": per, "u": u, "every": every, "byass": byass, "rts": full}
        out["run1"] = {k: session.get_tensor_data(t).tolist() for k, t in tensors.items()}
        # each instance writes its own values: its host copy is what it wrote until the
        # device runs; each replica then has its own instance's row
        mine = np.full((R, 3), float(popdist.getInstanceIndex()), np.float32)
        session.write_variable_data(per, mine)
        out["written"] = session.get_tensor_data(per).tolist()
        session.run({x_in: local})
    out["run2_per"] = session.get_tensor_data(per).tolist()
    out["roundtrip"] = roundtrip()
    (folder / f"instance{popdist.getInstanceIndex()}.json").write_text(json.dumps(out))


#: (stride, group_size) of the round-trip variables, over the 8 replicas
GROUPINGS = [(1, R), (1, 2), (2, 2), (4, 2), (1, 1), (2, 4)]
KINDS = ["onchip", "remote", "rts", "rts_buffer"]
MODES = ["one_per_group", "all_replicas"]


def host_data(k: int, groups: int) -> np.ndarray:
    """Case ``k``'s host data: ``(groups, 4, 2)``, the group axis only when several."""
    shape = (groups, 4, 2) if groups > 1 else (4, 2)
    return np.random.default_rng(k).random(shape).astype(np.float32)


def roundtrip() -> dict[str, list]:
    """As PopXL's test_multi_instance_vs_rts.py: variables of every kind (on chip,
    remote, replica-sharded, sharded in a ``replica_sharded_buffer``), grouping and
    retrieval mode, made on every instance from the same host data, run once on "ipu_hw",
    read back with get_tensor_data."""
    ir = popxl.Ir("popdist")
    made = {}
    with ir.main_graph:
        for k, ((stride, size), kind, mode) in enumerate(
            itertools.product(GROUPINGS, KINDS, MODES)
        ):
            rg = ir.replica_grouping(stride=stride, group_size=size)
            vh = host_data(k, rg.num_groups)
            if kind == "onchip":
                v = popxl.variable(vh, replica_grouping=rg, retrieval_mode=mode)
            elif kind == "remote":
                buf = popxl.remote_buffer((4, 2), popxl.float32, 1)
                v = popxl.remote_variable(vh, buf, 0, replica_grouping=rg, retrieval_mode=mode)
            elif kind == "rts":
                v, _ = popxl.replica_sharded_variable(
                    vh, popxl.float32, replica_grouping=rg, retrieval_mode=mode
                )
            else:
                buf = popxl.replica_sharded_buffer(vh.shape, popxl.float32, replica_grouping=rg)
                v = popxl.remote_replica_sharded_variable(
                    vh, buf, 0, replica_grouping=rg, retrieval_mode=mode
                )
                ops.remote_load(buf, 0)
            made[f"{k} {stride} {size} {kind} {mode}"] = v
    with popxl.Session(ir, "ipu_hw") as session:
        session.run()
    return {name: session.get_tensor_data(v).tolist() for name, v in made.items()}


if __name__ == "__main__":
    main(Path(sys.argv[1]))
