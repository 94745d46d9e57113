"""Replica runtimes: which of a replicated graph's replicas this process runs, and how their
data reach the others (DESIGN principle 6, "Replicas are an axis").

The engine keeps every tensor as ``[row, address]``, one row per replica it runs. A replica
runtime maps rows to global replicas and carries the two things that cross replicas:

* ``cross_copy``: a ``CrossReplicaCopy`` (each listed replica sends a region to another),
  the one primitive gcl's collectives are built from;
* ``gather_rows``: every replica's row of a host read, in global replica order, on every
  process (weights to the host).

:class:`LocalReplicas` runs all ``R`` replicas in this process: rows are replicas, copies
are row copies. :class:`InstanceReplicas` runs ``L`` consecutive replicas of an instance of
a PopRun job (rows ``0..L-1`` are replicas ``offset..offset+L-1``); a copy between replicas
of different instances is an MPI message between them (the replica map's pairs grouped per
peer instance, one message each way), so collectives give the same bits as in one process:
the same vertices combine the same chunks in the same order, only the transport differs.
Code above the engine never knows which runtime it has.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tremula.errors import DistributedConfigError

Read = Callable[[np.ndarray], np.ndarray]  # rows -> [k, n] values of those rows
Write = Callable[[np.ndarray, np.ndarray], None]  # (rows, [k, n] values)
RowView = Callable[[int], np.ndarray]  # row -> its [n] region of device memory (a view)
RowViews = tuple[RowView, RowView]  # (source, destination)


class LocalReplicas:
    """All ``total`` replicas in this process: row ``r`` is replica ``r``."""

    offset = 0
    instance = 0
    instances = 1

    def __init__(self, total: int) -> None:
        self.total = int(total)
        self.count = self.total
        self.ids = np.arange(self.total, dtype=np.int64)

    @property
    def distributed(self) -> bool:
        return False

    def cross_copy(
        self,
        key: Any,
        sources: np.ndarray,
        dests: np.ndarray,
        read: Read,
        write: Write,
        width: tuple[int, np.dtype],
        row_views: RowViews | None = None,
    ) -> None:
        """Copy ``read`` of each source replica to ``write`` of its destination replica
        (``width``: elements and dtype of one replica's region; ``row_views``: views of a
        row's source and destination regions in device memory, when they are single runs
        that do not overlap)."""
        write(dests, read(sources))

    def gather_rows(self, rows: np.ndarray) -> np.ndarray:
        """``[total, ...]`` from this process's ``[count, ...]`` rows."""
        return rows

    def peers_of(self, sources: np.ndarray, dests: np.ndarray) -> dict[str, Any]:
        """The other instances a copy sends to and receives from, and how many replica
        regions it sends and receives (none in one process)."""
        return {"sendsTo": [], "receivesFrom": [], "regionsSent": 0, "regionsReceived": 0}


@dataclass
class _CopyPlan:
    """A ``CrossReplicaCopy`` seen from one instance: its local pairs as rows, and per peer
    instance the rows it sends and receives (pairs in replica-map order)."""

    local_src: np.ndarray
    local_dst: np.ndarray
    sends: list[tuple[int, np.ndarray]] = field(default_factory=list)
    recvs: list[tuple[int, np.ndarray]] = field(default_factory=list)


class InstanceReplicas(LocalReplicas):
    """Replicas ``[offset, offset + count)`` of ``total``, the rest on the other instances
    of an MPI communicator (instance ``i`` runs replicas ``[i count, (i + 1) count)``).

    Args:
        total: the global replica count ``R``.
        offset: this instance's first replica.
        count: replicas per instance ``L`` (uniform).
        comm: an mpi4py communicator of the ``R / L`` instances, rank = instance index.

    Raises:
        DistributedConfigError: the layout and the communicator disagree.
    """

    def __init__(self, total: int, offset: int, count: int, comm: Any) -> None:
        if count < 1 or total % count or offset % count or not 0 <= offset < total:
            raise DistributedConfigError(
                f"replica runtime: replicas [{offset}, {offset + count}) of {total} are not "
                f"one instance's block of a uniform layout"
            )
        instances = total // count
        if comm.Get_size() != instances or comm.Get_rank() != offset // count:
            raise DistributedConfigError(
                f"replica runtime: {total} replicas in blocks of {count} need {instances} "
                f"instance(s) with this one at index {offset // count}; the MPI world has "
                f"{comm.Get_size()} with this one at {comm.Get_rank()}"
            )
        self.total = int(total)
        self.offset = int(offset)
        self.count = int(count)
        self.instance = self.offset // self.count
        self.instances = instances
        self.ids = np.arange(self.offset, self.offset + self.count, dtype=np.int64)
        self.comm = comm
        self._plans: dict[Any, _CopyPlan] = {}

    @property
    def distributed(self) -> bool:
        return self.instances > 1

    def _plan(self, key: Any, sources: np.ndarray, dests: np.ndarray) -> _CopyPlan:
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        L, me = self.count, self.instance
        s_inst, d_inst = sources // L, dests // L
        local = (s_inst == me) & (d_inst == me)
        plan = _CopyPlan(sources[local] - self.offset, dests[local] - self.offset)
        for peer in range(self.instances):
            if peer == me:
                continue
            out = (s_inst == me) & (d_inst == peer)
            if out.any():
                plan.sends.append((peer, sources[out] - self.offset))
            into = (d_inst == me) & (s_inst == peer)
            if into.any():
                plan.recvs.append((peer, dests[into] - self.offset))
        self._plans[key] = plan
        return plan

    def cross_copy(
        self,
        key: Any,
        sources: np.ndarray,
        dests: np.ndarray,
        read: Read,
        write: Write,
        width: tuple[int, np.dtype],
        row_views: RowViews | None = None,
    ) -> None:
        """The local pairs as row copies, the others as MPI messages to and from each peer
        instance (non-blocking, so rings of instances do not wait on each other): one per
        peer, or with ``row_views`` one per row, sent from and received into device memory
        itself (no copies)."""
        from tremula.popdist import backend

        plan = self._plan(key, sources, dests)
        if not plan.sends and not plan.recvs:
            if plan.local_src.size:
                write(plan.local_dst, read(plan.local_src))
            return
        comm, requests, received = self.comm, [], []
        for peer, rows in plan.recvs:
            if row_views is not None:  # straight into the destination rows
                into = row_views[1]
                for j, row in enumerate(rows.tolist()):
                    requests.append(comm.Irecv(_bytes(into(row)), source=peer, tag=_TAG + j))
                continue
            buf = np.empty((rows.size, width[0]), dtype=width[1])
            requests.append(comm.Irecv(_bytes(buf), source=peer, tag=_TAG))
            received.append((rows, buf))
        outgoing = []
        for peer, rows in plan.sends:
            if row_views is not None:  # straight from the source rows (no write touches them)
                out = row_views[0]
                for j, row in enumerate(rows.tolist()):
                    requests.append(comm.Isend(_bytes(out(row)), dest=peer, tag=_TAG + j))
                continue
            data = np.ascontiguousarray(read(rows))
            outgoing.append(data)  # kept alive until the send completes
            requests.append(comm.Isend(_bytes(data), dest=peer, tag=_TAG))
        if plan.local_src.size:
            write(plan.local_dst, read(plan.local_src))
        with backend.watch(f"a cross-instance copy ({key})"):
            backend.mpi().Request.Waitall(requests)
        for rows, buf in received:
            write(rows, buf)

    def gather_rows(self, rows: np.ndarray) -> np.ndarray:
        """Every instance's rows, in global replica order, on every instance (one
        all-gather)."""
        from tremula.popdist import backend

        mine = np.ascontiguousarray(rows)
        out = np.empty((self.instances, *mine.shape), dtype=mine.dtype)
        with backend.watch("a gather of replica data to the host"):
            self.comm.Allgather(_bytes(mine), _bytes(out))
        return out.reshape(self.total, *mine.shape[1:])

    def peers_of(self, sources: np.ndarray, dests: np.ndarray) -> dict[str, Any]:
        plan = self._plan(("peers", sources.tobytes(), dests.tobytes()), sources, dests)
        return {
            "sendsTo": [int(p) for p, _ in plan.sends],
            "receivesFrom": [int(p) for p, _ in plan.recvs],
            "regionsSent": int(sum(r.size for _, r in plan.sends)),
            "regionsReceived": int(sum(r.size for _, r in plan.recvs)),
        }


_TAG = 7


def _bytes(arr: np.ndarray) -> np.ndarray:
    """A contiguous array as bytes (MPI moves raw bytes: float16, bool and float8 codes need
    no MPI datatype)."""
    return arr.reshape(-1).view(np.uint8)


def runtime_replicas(total: int, first: int = 0, count: int | None = None) -> LocalReplicas:
    """The replica runtime for replicas ``[first, first + count)`` of ``total``: all of
    them in this process, or this instance's block of a PopRun job (over the MPI world).

    Raises:
        DistributedConfigError: a block that is not one instance's part of the world.
    """
    count = total if count is None else int(count)
    if first == 0 and count == total:
        return LocalReplicas(total)
    from tremula.popdist import backend

    return InstanceReplicas(total, first, count, backend.device_comm())
