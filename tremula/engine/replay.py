"""Replaying the timeline of repeated runs.

A program without data-dependent control flow (no ``If``, ``Switch`` or ``RepeatWhile``)
produces the same steps every run, and its effect on the per-tile clocks depends only on the
clocks' shape when it starts (their values relative to the earliest tile) and on where the
previous step ended. :class:`TimelineReplay` records that effect on the first run from a
given shape and replays it afterwards: the numbers still run every time, the timeline work
(reductions over every tile for every step) is done once. Profiles are identical to those of
a full simulation.

The numbers of a static program run through ``run.flatten``: a flat list of calls made
once per program from the same table of node kinds the interpreter dispatches on
(``run.KINDS``), in place of the interpreter's walk over nodes (on the CPU target too,
which has no timeline).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tremula.engine import nodes as N
from tremula.engine.flatplan import FlatPlan
from tremula.engine.run import KINDS, flatten
from tremula.engine.timeline import NullTimeline, Timeline


def is_static(root: N.Node) -> bool:
    """True when no node reachable from ``root`` (function bodies included) branches on
    data (its kind has no flat form) or runs vertices whose cycles depend on it
    (``Codelet.run_cycles``)."""
    return all(
        KINDS[type(node)].flat is not None
        and not (isinstance(node, N.OnTileNode) and node.ccs.dynamic)
        for node in N.reachable(root)
    )


class TimelineReplay:
    def __init__(self, roots: list[N.Node]) -> None:
        self.static = [is_static(r) for r in roots]
        self.cache: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._null: NullTimeline | None = None
        self._plans: dict[int, tuple[Any, FlatPlan]] = {}  # program -> (runtime, steps)

    def run(self, rt: Any, index: int, root: N.Node) -> None:
        tl: Timeline = rt.tl
        if not self.static[index]:
            rt.run(root)
            return
        if isinstance(tl, NullTimeline):  # no timeline to replay (the CPU target)
            plan = self._plan(rt, index, root)
            for step in plan:
                step()
            if rt.record_cs:
                plan.add_cycles(rt)
            return
        base = int(tl.t.min())
        key = (index, (tl.t - base).tobytes(), tl.prev_to - base, tl.record)
        hit = self.cache.get(key)
        if hit is None:
            self._record(rt, tl, root, key, base)
            return
        steps, trace, cycles, shape, prev = hit
        if self._null is None:
            self._null = NullTimeline(tl.target)
        plan = self._plan(rt, index, root)
        rt.tl = self._null
        try:
            for step in plan:
                step()
        finally:
            rt.tl = tl
        if rt.record_cs:
            plan.add_cycles(rt)
        tl.steps.add_shifted(base, steps)
        tl.trace.extend(trace)
        for k, v in cycles.items():
            tl.tile_cycles[k] += v
        np.add(shape, base, out=tl.t)
        tl.prev_to = prev + base

    def _plan(self, rt: Any, index: int, root: N.Node) -> FlatPlan:
        """Program ``index``'s flattened steps for runtime ``rt`` (made on first use)."""
        plan = self._plans.get(index)
        if plan is None or plan[0] is not rt:
            plan = self._plans[index] = (rt, flatten(rt, root))
        return plan[1]

    def _record(self, rt: Any, tl: Timeline, root: N.Node, key: tuple, base: int) -> None:
        n_steps, n_trace, before = len(tl.steps), len(tl.trace), dict(tl.tile_cycles)
        rt.run(root)
        steps = [(info, s - base, e - base, o, b) for info, s, e, o, b in tl.steps[n_steps:]]
        cycles = {k: tl.tile_cycles[k] - before[k] for k in before}
        self.cache[key] = (steps, tl.trace[n_trace:], cycles, tl.t - base, tl.prev_to - base)
