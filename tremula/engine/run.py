"""The reference interpreter: one handler per node type of the step plan (a dispatch table).

State is a :class:`Runtime`: storage for every element type (``[replica, address]``, one
row per replica this process runs: all of them, or an instance's block of a PopRun job),
remote buffers (``[replica, row, element]``), stream connections and host-function
callbacks. Handlers take a replica selection ``rsel``: ``slice(None)`` for all replicas
(the fast path), or a sorted index array when replicas took different branches. The
timeline follows replica 0.

The same table gives the replayed runs of a static program their flat list of calls
(:func:`flatten`): the leaves' replayed data effects are ``flatplan.py``'s, the host
actions' handlers ``hostactions.py``'s.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from tremula.engine import nodes as N
from tremula.engine.flatplan import (
    FlatPlan,
    FlatStep,
    _append,
    _flat_compute,
    _flat_exchange,
    _flat_host,
    _steps,
)
from tremula.engine.hostactions import _host
from tremula.engine.hostclock import HostClock
from tremula.engine.plan import Gather
from tremula.engine.streams import ALL, StreamConnection
from tremula.engine.timeline import Timeline
from tremula.poplar.intervals import distinct
from tremula.poplar.types import Type


class Runtime:
    """Device state and the interpreter over the step plan's nodes."""

    def __init__(
        self, step_plan: Any, replicas: Any, timeline: Timeline, record_cs: bool = False
    ) -> None:
        st = step_plan.state
        self.step_plan = step_plan
        #: the replica runtime (``tremula.popdist.replicas``): which replicas the rows are
        self.group = replicas
        self.replicas = replicas = self.group.count  # rows of storage
        self.storage: dict[Type, np.ndarray] = {
            t: np.zeros((replicas, sp.size), dtype=t.numpy) for t, sp in st.spaces.items()
        }
        self.remote = {
            name: np.zeros((replicas, b.repeats, b.num_elements), dtype=b.dtype.numpy)
            for name, b in st.remote_buffers.items()
        }
        self.streams: dict[str, StreamConnection] = {}
        self.host_functions: dict[str, tuple[Callable[..., Any], bool]] = {}  # fn, all replicas
        self.replica_ids = self.group.ids
        self.tl = timeline
        self.record_cs = record_cs
        self.cs_cycles = np.zeros((len(step_plan.compute_sets), st.target.num_tiles), np.int64)
        self.out = sys.stdout
        #: ``bar(total, name)``: a progress bar (``tremula.progress.bar``) for an outermost
        #: ``Repeat`` of ``total`` iterations, advanced once per iteration; None (the
        #: default) shows nothing and costs one test per loop, not per iteration
        self.loop_progress: Callable[[int, str], Any] | None = None
        self._in_shown_loop = False
        #: the host CPU time of each step's data effect (``autoReport.outputHostTime``),
        #: set before the first run; None (the default) times nothing
        self.host_clock: HostClock | None = None

    def _tl(self, rsel: slice | np.ndarray) -> bool:
        return isinstance(rsel, slice) or (rsel.size > 0 and rsel[0] == 0)

    def trace(self, pid: int, rsel: slice | np.ndarray) -> None:
        if self._tl(rsel):
            self.tl.program(pid)

    def run(self, node: N.Node, rsel: slice | np.ndarray = ALL) -> None:
        KINDS[type(node)].run(self, node, rsel)

    # ---- helpers ----
    def scalar(self, g: Gather, rsel: slice | np.ndarray) -> np.ndarray:
        return g.read(self.storage, rsel)[:, 0]

    def subsets(self, rsel: slice | np.ndarray, keys: np.ndarray) -> list[tuple[Any, Any]]:
        """Split the selected replicas by ``keys``: ``[(key, rsel_of_key)]``; the fast path
        keeps ``rsel`` when all agree."""
        first = keys[0]
        if np.all(keys == first):
            return [(first, rsel)]
        reps = np.arange(self.replicas)[rsel]
        return [(k, reps[keys == k]) for k in distinct(keys)]


# ---- leaves: a data effect, then the node's steps on the timeline (replica 0) ----
def _compute(rt: Runtime, node: N.OnTileNode, rsel: Any) -> None:
    node.ccs.run(rt.storage, rsel, rt.replica_ids if rsel is ALL else rt.replica_ids[rsel])
    if not rt._tl(rsel):
        return
    cycles = node.ccs.cycles_by_tile
    if node.ccs.dynamic:  # the step of this run's data
        cycles = node.note_live(rt.step_plan.state.target)
    if rt.record_cs:
        rt.cs_cycles[node.ccs.id] += cycles


def _note_compute(tl: Timeline, node: N.OnTileNode) -> None:
    tl.program(node.pid)
    tl.run(node.step if node.live is None else node.live)


def _exchange(rt: Runtime, node: N.ExchangeNode, rsel: Any) -> None:
    if node.plan is not None:
        node.plan.run(rt.storage, rsel)


def _cross_replica(rt: Runtime, node: N.CrossReplicaNode, rsel: Any) -> None:
    storage, src, dst = rt.storage, node.src, node.dst
    rt.group.cross_copy(  # rows in this process; MPI messages to other instances' replicas
        id(node),
        node.sources,
        node.dests,
        lambda rows: src.read(storage, rows),  # [pairs, n], a copy (fancy index)
        lambda rows, values: dst.write(storage, rows, values),
        (src.size, src.dtype.numpy),
        _row_views(storage, src, dst),
    )


def _row_views(storage: dict, src: Gather, dst: Gather) -> Any:
    """``(source row -> view, destination row -> view)`` of a copy whose regions are single
    runs of storage that do not overlap, so that messages leave from and land in device
    memory without copies; None otherwise."""
    a, b = src.index, dst.index
    if not (isinstance(a, slice) and isinstance(b, slice)):
        return None
    if src.dtype == dst.dtype and a.start < b.stop and b.start < a.stop:
        return None
    s, d = storage[src.dtype], storage[dst.dtype]
    return (lambda row: s[row, a]), (lambda row: d[row, b])


def _note_step(tl: Timeline, node: Any) -> None:
    tl.program(node.pid)
    tl.run(node.step)


def _note_sync_step(tl: Timeline, node: Any) -> None:
    tl.program(node.pid)
    tl.run(node.sync)
    tl.run(node.step)


def _note_program(tl: Timeline, node: Any) -> None:
    tl.program(node.pid)


def _leaf(
    effect: Callable[[Runtime, Any, Any], None] | None,
    note: Callable[[Timeline, Any], None],
    flat: Callable[[Runtime, Any, list[FlatStep]], None] | None = None,
) -> Kind:
    """The kind of a node without children: ``effect`` moves the data (None for a node that
    only moves clocks), ``note`` puts the node's steps on the timeline; ``flat`` replaces
    the replayed effect (by default ``effect`` on all replicas)."""

    def run(rt: Runtime, node: Any, rsel: Any) -> None:
        if effect is not None:
            if rt.host_clock is None:
                effect(rt, node, rsel)
            else:
                rt.host_clock.call(node, effect, rt, node, rsel)
        if rt._tl(rsel):
            note(rt.tl, node)

    def flat_effect(rt: Runtime, node: Any, into: list[FlatStep]) -> None:
        if effect is not None:
            _append(rt, node, partial(effect, rt, node, ALL), into)

    return Kind(run, flat or flat_effect)


# ---- nodes with children ----
def _seq(rt: Runtime, node: N.SeqNode, rsel: Any) -> None:
    rt.trace(node.pid, rsel)
    for child in node.nodes:
        rt.run(child, rsel)


def _flat_seq(rt: Runtime, node: N.SeqNode, into: list[FlatStep]) -> None:
    for child in node.nodes:
        flatten_into(rt, child, into)


def _call(rt: Runtime, node: N.CallNode, rsel: Any) -> None:
    rt.trace(node.pid, rsel)
    rt.run(node.callee, rsel)


def _flat_call(rt: Runtime, node: N.CallNode, into: list[FlatStep]) -> None:
    flatten_into(rt, node.callee, into)


def _repeat(rt: Runtime, node: N.RepeatNode, rsel: Any) -> None:
    rt.trace(node.pid, rsel)
    body, run = node.body, KINDS[type(node.body)].run
    if rt.loop_progress is not None and _shown(rt, node):
        _shown_loop(rt, rt.loop_progress, node, partial(run, rt, body, rsel))
        return
    for _ in range(node.count):
        run(rt, body, rsel)


def _flat_repeat(rt: Runtime, node: N.RepeatNode, into: list[FlatStep]) -> None:
    body = FlatPlan()
    flatten_into(rt, node.body, body)
    if isinstance(into, FlatPlan):
        into.tally_repeated(body, node.count)
    into.append(partial(_loop, rt, node, list(body)))


def _loop(rt: Runtime, node: N.RepeatNode, body: list[FlatStep]) -> None:
    if rt.loop_progress is not None and _shown(rt, node):
        _shown_loop(rt, rt.loop_progress, node, partial(_steps, body))
        return
    for _ in range(node.count):
        for step in body:
            step()


def _shown(rt: Runtime, node: N.RepeatNode) -> bool:
    """A loop's iterations advance a bar when it is the outermost shown loop (a loop nested
    in it runs inside one of its iterations) and runs more than once."""
    return not rt._in_shown_loop and node.count > 1


def _shown_loop(
    rt: Runtime, bars: Callable[[int, str], Any], node: N.RepeatNode, iteration: FlatStep
) -> None:
    """Run ``node.count`` iterations, advancing a bar made by ``bars`` (the runtime's
    ``loop_progress``) after each."""
    rt._in_shown_loop = True
    try:
        with bars(node.count, node.name) as bar:
            for _ in range(node.count):
                iteration()
                bar.update(1)
    finally:
        rt._in_shown_loop = False


# ---- control flow on data: run only through the interpreter ----
def _repeat_while(rt: Runtime, node: N.RepeatWhileNode, rsel: Any) -> None:
    rt.trace(node.pid, rsel)
    active = rsel
    while True:
        rt.run(node.condition, active)
        if rt._tl(active):
            rt.tl.run(node.sync)
        pred = rt.scalar(node.predicate, active) != 0
        go = ~pred if node.until else pred
        if not go.any():
            return
        if not go.all():  # replicas leave the loop one by one
            active = np.arange(rt.replicas)[active][go]
        rt.run(node.body, active)


def _if(rt: Runtime, node: N.IfNode, rsel: Any) -> None:
    rt.trace(node.pid, rsel)
    if rt._tl(rsel):
        rt.tl.run(node.sync)
    pred = rt.scalar(node.predicate, rsel) != 0
    for key, sub in rt.subsets(rsel, pred):
        branch = node.then if key else node.else_
        if branch is not None:
            rt.run(branch, sub)


def _switch(rt: Runtime, node: N.SwitchNode, rsel: Any) -> None:
    rt.trace(node.pid, rsel)
    if rt._tl(rsel):
        rt.tl.run(node.sync)
    control = rt.scalar(node.control, rsel).astype(np.int64)
    match = control[:, None] == node.values[None, :]
    which = np.where(match.any(axis=1), match.argmax(axis=1), -1)
    for key, sub in rt.subsets(rsel, which):
        rt.run(node.cases[key] if key >= 0 else node.default, sub)


# ---- the dispatch table ----
@dataclass(frozen=True)
class Kind:
    """How the engine runs one node type.

    Attributes:
        run: the interpreter's handler ``run(runtime, node, rsel)``: the data effect on the
            selected replicas and the node's steps on the timeline.
        flat: for the replayed runs of a static program (``replay.py``):
            ``flat(runtime, node, into)`` appends the node's data effect on all replicas to
            ``into`` as calls without arguments (no timeline: it is replayed apart). None for
            a node that branches on data: a program holding one is not static.
    """

    run: Callable[[Runtime, Any, Any], None]
    flat: Callable[[Runtime, Any, list[FlatStep]], None] | None


KINDS: dict[type, Kind] = {
    N.SeqNode: Kind(_seq, _flat_seq),
    N.CallNode: Kind(_call, _flat_call),
    N.RepeatNode: Kind(_repeat, _flat_repeat),
    N.OnTileNode: _leaf(_compute, _note_compute, _flat_compute),
    N.ExchangeNode: _leaf(_exchange, _note_sync_step, _flat_exchange),
    N.CrossReplicaNode: _leaf(_cross_replica, _note_sync_step),
    N.HostNode: _leaf(_host, _note_sync_step, _flat_host),
    N.SyncNode: _leaf(None, _note_step),
    N.WriteUndefNode: _leaf(None, _note_program),
    N.RepeatWhileNode: Kind(_repeat_while, None),
    N.IfNode: Kind(_if, None),
    N.SwitchNode: Kind(_switch, None),
}


def flatten(rt: Runtime, root: N.Node) -> FlatPlan:
    """The data effects of a static program as a flat list of calls, for replayed runs (the
    timeline is replayed apart): sequences and calls are inlined, repeats loop over their
    flattened body, leaves are their data effect alone, and steps that only move clocks
    (syncs, undefined writes, copy-free exchanges) vanish. Compute sets are their vertex
    groups' prepared runs; their cycles are tallied in the plan (:meth:`FlatPlan.add_cycles`)."""
    out = FlatPlan()
    flatten_into(rt, root, out)
    return out


def flatten_into(rt: Runtime, node: N.Node, into: list[FlatStep]) -> None:
    kind = KINDS[type(node)]
    if kind.flat is None:  # branches on data: through the interpreter, on all replicas
        into.append(partial(kind.run, rt, node, ALL))
    else:
        kind.flat(rt, node, into)
