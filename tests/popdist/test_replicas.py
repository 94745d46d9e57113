"""Replica runtimes, the link a cross-replica copy is costed on, and the engine options
that pick an instance's block of replicas (in one process; the launches are elsewhere)."""

from __future__ import annotations

import numpy as np
import pytest

from tremula import poplar
from tremula import target as targets
from tremula.engine.exchange import cross_replica_link
from tremula.engine.options import parse_options
from tremula.errors import DistributedConfigError, EngineError, TargetError
from tremula.popdist.replicas import InstanceReplicas, LocalReplicas, runtime_replicas


class _World:
    def __init__(self, size: int, rank: int) -> None:
        self.size, self.rank = size, rank

    def Get_size(self) -> int:
        return self.size

    def Get_rank(self) -> int:
        return self.rank


def test_local_replicas_copy_rows_and_gather_nothing() -> None:
    reps = runtime_replicas(4)
    assert isinstance(reps, LocalReplicas) and not reps.distributed
    assert reps.ids.tolist() == [0, 1, 2, 3]
    rows = np.arange(8.0).reshape(4, 2)
    out = np.zeros_like(rows)

    def write(r, v):
        out[r] = v

    reps.cross_copy(
        0, np.array([0, 1, 2, 3]), np.array([1, 2, 3, 0]), lambda r: rows[r], write, (2, rows.dtype)
    )
    assert np.array_equal(out, np.roll(rows, 1, axis=0))
    assert reps.gather_rows(rows) is rows
    assert reps.peers_of(np.array([0]), np.array([1]))["sendsTo"] == []


def test_instance_replicas_plan_messages_per_peer() -> None:
    reps = InstanceReplicas(8, 2, 2, _World(4, 1))  # instance 1 of 4: replicas 2, 3
    assert reps.ids.tolist() == [2, 3] and reps.distributed
    # a ring over all 8 replicas: 1 -> 2 comes in, 2 -> 3 stays, 3 -> 4 goes out
    src, dst = np.arange(8), (np.arange(8) + 1) % 8
    plan = reps._plan("ring", src, dst)
    assert plan.local_src.tolist() == [0] and plan.local_dst.tolist() == [1]
    assert [(p, r.tolist()) for p, r in plan.sends] == [(2, [1])]
    assert [(p, r.tolist()) for p, r in plan.recvs] == [(0, [0])]
    peers = reps.peers_of(src, dst)
    assert (peers["sendsTo"], peers["receivesFrom"], peers["regionsSent"]) == ([2], [0], 1)


@pytest.mark.parametrize(
    ("total", "offset", "count", "world", "match"),
    [
        (8, 1, 2, (4, 0), "not one instance's block"),
        (8, 2, 3, (4, 1), "not one instance's block"),
        (8, 2, 2, (3, 1), "the MPI world has 3"),
        (8, 2, 2, (4, 2), "this one at 2"),
    ],
)
def test_instance_replicas_refuse_layouts_the_world_contradicts(total, offset, count, world, match):
    with pytest.raises(DistributedConfigError, match=match):
        InstanceReplicas(total, offset, count, _World(*world))


def test_copies_between_ipu_link_domains_use_the_gw_links() -> None:
    tg = targets.ipu2(ipu_link_domain_size=2)  # a replica is one IPU: domains {0,1}, {2,3}
    inside = np.array([[0, 1], [2, 3]])
    across = np.array([[1, 2], [0, 1]])
    assert cross_replica_link(tg, inside) == ("IPU-Link", tg.ipu_link_bytes_per_cycle)
    assert cross_replica_link(tg, across) == ("GW-Link", tg.gw_link_bytes_per_cycle)
    assert tg.gw_link_bytes_per_cycle < tg.ipu_link_bytes_per_cycle
    assert cross_replica_link(targets.ipu2(), across)[0] == "IPU-Link"  # one domain of 64


def test_poplar_target_options_set_the_link_domain(monkeypatch) -> None:
    monkeypatch.setenv("POPLAR_TARGET_OPTIONS", '{"ipuLinkDomainSize": 4}')
    assert poplar.IPUModel().create_target().ipu_link_domain_size == 4
    monkeypatch.setenv("POPLAR_TARGET_OPTIONS", '{"ipuLinkDomainSize": 0}')
    with pytest.raises(TargetError, match="ipuLinkDomainSize 0"):
        poplar.IPUModel()
    monkeypatch.setenv("POPLAR_TARGET_OPTIONS", "[1]")
    with pytest.raises(TargetError, match="JSON object"):
        poplar.IPUModel()


def test_runtime_replica_engine_options() -> None:
    o = parse_options({"target.firstRuntimeReplica": "2", "target.numberRuntimeReplica": 2}, {})
    assert (o.first_runtime_replica, o.number_runtime_replica) == (2, 2)
    assert parse_options({}, {}).number_runtime_replica is None
    with pytest.raises(EngineError, match=r"target\.numberRuntimeReplica"):
        parse_options({"target.numberRuntimeReplica": "two"}, {})
