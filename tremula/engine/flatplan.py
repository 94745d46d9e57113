"""The replayed flat plan's leaves: the data effects of a static program's leaf nodes as
calls without arguments (``run.flatten`` walks the program and inlines its sequences, calls
and repeats; ``replay.py`` runs the list).

A compute set is its vertex groups' prepared runs, joined with the run before it
(``fusion.runs_joined``) or fused with the compute set before it (``fusion.fused_step``)
when the codelets offer it; its cycles are tallied once per plan (:class:`FlatPlan`). A
stream transfer of a one-replica device goes straight between the connected buffer and
device memory (``streams.replayed_take`` / ``replayed_give``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from tremula.engine import nodes as N
from tremula.engine.fusion import fused_step, runs_joined
from tremula.engine.hostactions import _host
from tremula.engine.streams import ALL, replayed_give, replayed_take
from tremula.numerics import unguarded

if TYPE_CHECKING:
    from tremula.engine.plan import Gather
    from tremula.engine.run import Runtime

FlatStep = Callable[[], None]


class FlatPlan(list):
    """A flat list of calls (``run.flatten``) and the compute sets it runs, with how many
    times (``counts``: compute-set id -> runs), so that a replayed run adds their cycles
    to ``Runtime.cs_cycles`` at once (:meth:`add_cycles`) instead of per call."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[int, int] = {}
        self.cycles: dict[int, np.ndarray] = {}
        #: the last compute set appended: (node, first step, end), for fusion (``_fused``)
        self.last_compute: tuple[N.OnTileNode, int, int] | None = None

    def tally(self, ccs: Any, times: int = 1) -> None:
        self.counts[ccs.id] = self.counts.get(ccs.id, 0) + times
        self.cycles[ccs.id] = ccs.cycles_by_tile

    def tally_repeated(self, body: FlatPlan, count: int) -> None:
        for i, n in body.counts.items():
            self.counts[i] = self.counts.get(i, 0) + n * count
            self.cycles[i] = body.cycles[i]

    def add_cycles(self, rt: Runtime) -> None:
        """What the interpreter adds to ``rt.cs_cycles`` for the compute sets of one run
        (a sum of integers: the order does not matter)."""
        for i, n in self.counts.items():
            if n:
                rt.cs_cycles[i] += n * self.cycles[i]


def _flat_compute(rt: Runtime, node: N.OnTileNode, into: list[FlatStep]) -> None:
    """A compute set's replayed data effect: each vertex group's prepared run bound as it
    is (``CompiledGroup.prepared``; without its :func:`numerics.quiet` guard, as a replayed
    run is always inside ``quietly``), or its run through ``compute`` where the codelet
    prepares none; the compute set's cycles are tallied once per plan (:class:`FlatPlan`)."""
    storage, ids = rt.storage, rt.replica_ids
    steps = [
        unguarded(g.prepared(storage, ids)) or partial(g.run, storage, ALL, ids)
        for g in node.ccs.groups
    ]
    if isinstance(into, FlatPlan):
        into.tally(node.ccs)
        if _fused(rt, node, into):
            return
    if rt.host_clock is not None:
        start: int | None = len(into)
        into.append(rt.host_clock.timed(node, partial(_steps, steps)))
    else:
        start = len(into)
        joined = runs_joined(into[-1], steps[0]) if into and steps else None
        if joined is not None:  # the step before and this compute set's first, one call
            into[-1], steps, start = joined, steps[1:], None
        into.extend(steps)
    if isinstance(into, FlatPlan):  # a compute set partly joined to the step before is
        # not offered whole for compute-set fusion with the next one
        into.last_compute = None if start is None else (node, start, len(into))


def _fused(rt: Runtime, node: N.OnTileNode, into: FlatPlan) -> bool:
    """Replace the steps of the compute set just before ``node`` (nothing appended since)
    by their fused run with ``node``'s (``fusion.fused_step``) when the codelets offer one."""
    last, into.last_compute = into.last_compute, None
    if last is None or last[2] != len(into):
        return False
    run = fused_step(rt, last[0], node)
    if run is None:
        return False
    del into[last[1] :]
    into.append(run)
    return True


def _flat_host(rt: Runtime, node: N.HostNode, into: list[FlatStep]) -> None:
    """A host action's replayed data effect: a stream transfer of a one-replica device
    through :func:`replayed_take` / :func:`replayed_give` (the interpreter's handler for
    what they do not cover), any other action through its handler."""
    action, slow = node.action, partial(_host, rt, node, ALL)
    step: FlatStep = slow
    if rt.replicas == 1 and isinstance(action, N.StreamIn):
        dst = _device_view(rt, action.dst)
        put = partial(action.dst.write, rt.storage, ALL) if dst is None else partial(np.copyto, dst)
        step = replayed_take(rt.streams, action.stream.name, action.stream.dtype.numpy, put, slow)
    elif rt.replicas == 1 and isinstance(action, N.StreamOut):
        src = _device_view(rt, action.src)
        get = partial(action.src.read, rt.storage, ALL) if src is None else partial(_same, src)
        step = replayed_give(rt.streams, action.stream.name, get, slow)
    _append(rt, node, step, into)


def _device_view(rt: Runtime, gather: Gather) -> np.ndarray | None:
    """The ``[replica, element]`` view of device memory that ``gather`` reads and writes,
    made once per plan (the runtime's memory stays put while it is loaded), or None when
    its addresses are not consecutive."""
    index = gather.index
    return rt.storage[gather.dtype][:, index] if isinstance(index, slice) else None


def _same(arr: np.ndarray) -> np.ndarray:
    return arr


def _flat_exchange(rt: Runtime, node: N.ExchangeNode, into: list[FlatStep]) -> None:
    if node.plan is not None:  # an exchange without a copy only moves clocks
        _append(rt, node, partial(node.plan.run, rt.storage, ALL), into)


def _append(rt: Runtime, node: N.Node, step: FlatStep, into: list[FlatStep]) -> None:
    """Append a leaf's replayed data effect, timed when the runtime keeps host time."""
    into.append(step if rt.host_clock is None else rt.host_clock.timed(node, step))


def _steps(body: list[FlatStep]) -> None:
    for step in body:
        step()
