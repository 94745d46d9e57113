"""The reference interpreter: one handler per node type of the step plan (a dispatch table).

State is a :class:`Runtime`: storage for every element type (``[replica, address]``, one
row per replica this process runs: all of them, or an instance's block of a PopRun job),
remote buffers (``[replica, row, element]``), stream connections and host-function
callbacks. Handlers take a replica selection ``rsel``: ``slice(None)`` for all replicas
(the fast path), or a sorted index array when replicas took different branches. The
timeline follows replica 0.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from tremula.engine import nodes as N
from tremula.engine.fusion import fused_step, runs_joined
from tremula.engine.hostclock import HostClock
from tremula.engine.plan import Gather
from tremula.engine.streams import ALL, StreamConnection, replayed_give, replayed_take
from tremula.engine.timeline import Timeline
from tremula.errors import EngineError, StreamError
from tremula.numerics import as_caller, unguarded
from tremula.poplar.handles import DataStream
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


def _host(rt: Runtime, node: N.HostNode, rsel: Any) -> None:
    action, handler = node.action, HOST_ACTIONS[type(node.action)]
    if _calls_user_code(rt, action):  # the user's error state, not the run's quiet one
        as_caller(handler, rt, action, rsel, node.name)
    else:
        handler(rt, action, rsel, node.name)


def _flat_host(rt: Runtime, node: N.HostNode, into: list[FlatStep]) -> None:
    """A host action's replayed data effect: a stream transfer of a one-replica device
    through :func:`replayed_take` / :func:`replayed_give` (the interpreter's handler for
    what they do not cover), any other action through its handler."""
    action, slow = node.action, partial(_host, rt, node, ALL)
    step: FlatStep = slow
    if rt.replicas == 1 and isinstance(action, N.StreamIn):
        put = partial(action.dst.write, rt.storage, ALL)
        step = replayed_take(rt.streams, action.stream.name, action.stream.dtype.numpy, put, slow)
    elif rt.replicas == 1 and isinstance(action, N.StreamOut):
        get = partial(action.src.read, rt.storage, ALL)
        step = replayed_give(rt.streams, action.stream.name, get, slow)
    _append(rt, node, step, into)


def _calls_user_code(rt: Runtime, action: Any) -> bool:
    """Whether a host action calls the user's code: a host function, or a stream transfer
    whose connection is a callback."""
    if isinstance(action, N.HostCall):
        return True
    if isinstance(action, N.StreamIn | N.StreamOut):
        conn = rt.streams.get(action.stream.name)
        return conn is not None and conn.callback is not None
    return False


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


def _flat_exchange(rt: Runtime, node: N.ExchangeNode, into: list[FlatStep]) -> None:
    if node.plan is not None:  # an exchange without a copy only moves clocks
        _append(rt, node, partial(node.plan.run, rt.storage, ALL), into)


def _append(rt: Runtime, node: N.Node, step: FlatStep, into: list[FlatStep]) -> None:
    """Append a leaf's replayed data effect, timed when the runtime keeps host time."""
    into.append(step if rt.host_clock is None else rt.host_clock.timed(node, step))


# ---- host actions (the data effect of a HostNode) ----
def _remote_rows(
    rt: Runtime, action: N.RemoteLoad | N.RemoteStore, rsel: Any, where: str
) -> np.ndarray:
    buf, offset = action.buffer, action.offset
    if isinstance(offset, Gather):
        rows = offset.read(rt.storage, rsel).astype(np.int64)
    else:
        count = np.arange(rt.replicas)[rsel].size
        rows = np.full((count, 1), offset, dtype=np.int64)
    if rows.size and (rows.min() < 0 or rows.max() >= buf.repeats):
        bad = int(rows.min() if rows.min() < 0 else rows.max())
        raise EngineError(
            f"remote buffer {buf.name!r}: row offset {bad} out of range "
            f"[0, {buf.repeats}) in program {where!r}"
        )
    return rows


def _stream(rt: Runtime, stream: DataStream, where: str) -> StreamConnection:
    conn = rt.streams.get(stream.name)
    if conn is None:
        raise StreamError(
            f"stream {stream.name!r} is used by program {where!r} but not connected; call "
            f"engine.connect_stream({stream.name!r}, buffer_or_callback)"
        )
    return conn


def _stream_in(rt: Runtime, a: N.StreamIn, rsel: Any, where: str) -> None:
    data = _stream(rt, a.stream, where).take(rsel, a.stream.dtype)
    a.dst.write(rt.storage, rsel, data)


def _stream_out(rt: Runtime, a: N.StreamOut, rsel: Any, where: str) -> None:
    _stream(rt, a.stream, where).give(rsel, a.src.read(rt.storage, rsel))


def _remote_load(rt: Runtime, a: N.RemoteLoad, rsel: Any, where: str) -> None:
    rows = _remote_rows(rt, a, rsel, where)
    reps = np.arange(rt.replicas)[rsel]
    data = rt.remote[a.buffer.name][reps[:, None], rows]  # [replica, k, n]
    a.dst.write(rt.storage, rsel, data.reshape(reps.size, -1))


def _remote_store(rt: Runtime, a: N.RemoteStore, rsel: Any, where: str) -> None:
    rows = _remote_rows(rt, a, rsel, where)
    reps = np.arange(rt.replicas)[rsel]
    data = a.src.read(rt.storage, rsel).reshape(reps.size, rows.shape[1], -1)
    rt.remote[a.buffer.name][reps[:, None], rows] = data


def _host_call(rt: Runtime, a: N.HostCall, rsel: Any, where: str) -> None:
    hf = a.function
    connected = rt.host_functions.get(hf.name)
    if connected is None:
        raise EngineError(
            f"host function {hf.name!r} is called by program {where!r} but not connected; "
            f"call engine.connect_host_function({hf.name!r}, fn)"
        )
    fn, all_replicas = connected
    ins = [g.read(rt.storage, rsel) for g in a.inputs]
    reps = np.arange(rt.replicas)[rsel]
    outs = [np.zeros((reps.size, spec.num_elements), dtype=spec.dtype.numpy) for spec in hf.outputs]
    if all_replicas:  # one callback for the replicas together
        _host_results(hf, fn([x.copy() for x in ins], outs), outs)
    else:  # host work: one callback per replica, as Poplar does
        for i in range(reps.size):
            row_outs = [o[i] for o in outs]
            _host_results(hf, fn([x[i].copy() for x in ins], row_outs), row_outs)
    for g, o in zip(a.outputs, outs):
        g.write(rt.storage, rsel, o)


def _host_results(hf: Any, res: Any, outs: list[np.ndarray]) -> None:
    """Copy what a host callback returned (if anything) into its output arrays."""
    if res is None:
        return
    res = [res] if isinstance(res, np.ndarray) else list(res)
    if len(res) != len(outs):
        raise EngineError(
            f"host function {hf.name!r} returned {len(res)} arrays, declared {len(outs)} outputs"
        )
    for o, r in zip(outs, res):
        o[...] = np.asarray(r).reshape(o.shape)


def _print(rt: Runtime, a: N.Print, rsel: Any, where: str) -> None:
    data = a.src.read(rt.storage, rsel)
    for i, r in enumerate(rt.replica_ids[rsel]):
        prefix = a.title + (f" (replica {r})" if rt.group.total > 1 else "")
        value = np.array2string(data[i].reshape(a.shape), separator=", ")
        print(f"{prefix}: {value}", file=rt.out)


def _code_load(rt: Runtime, a: N.CodeLoad, rsel: Any, where: str) -> None:
    return None  # code is immutable; only the time and the liveness change


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


def _steps(body: list[FlatStep]) -> None:
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
FlatStep = Callable[[], None]


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

HOST_ACTIONS: dict[type, Callable[[Runtime, Any, Any, str], None]] = {
    N.StreamIn: _stream_in,
    N.StreamOut: _stream_out,
    N.RemoteLoad: _remote_load,
    N.RemoteStore: _remote_store,
    N.HostCall: _host_call,
    N.Print: _print,
    N.CodeLoad: _code_load,
}


class FlatPlan(list):
    """A flat list of calls (:func:`flatten`) and the compute sets it runs, with how many
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
