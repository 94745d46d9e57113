"""Fused replays of two consecutive compute sets.

A compute set that only consumes what the one before it produced into a temporary (poplin's
stage 2 summing the partial products of the block products) can compute both in one call
on replayed runs, without storing the temporary: the sum of the products written straight
into the output. The codelet of the second compute set offers such a run
(``Codelet.fuse``, see ``tremula/poplar/codelet.py``) and names the fields of the first
compute set whose values it does not store; the engine takes it only when those fields'
variables are *carried* from the first compute set to the second and nowhere else:

* none of them is always live (a constant, a host handle or initial value, read before it
  is written, used by several control programs);
* in the linearised programs (``liveness.Walk``: the order in which a static program runs
  its steps, a loop's body once) each one's accesses alternate between a write by the
  first compute set and a read by the second, starting with the write.

So every read of the temporary is by the second compute set, right after the first one wrote
all of it: no program can tell whether it was stored, and the numbers (which the fused run
computes with the same arithmetic) and every simulated figure stay those of the two compute
sets. The first run of a program goes through the interpreter and stores everything;
fusion applies to the flat replayed runs (``run.flatten``), not while the host clock
(``autoReport.outputHostTime``) times each step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tremula.engine import nodes as N
from tremula.engine.liveness import Intervals, Linearizer
from tremula.engine.plan import Gather
from tremula.engine.streams import ALL

#: whether replayed runs fuse compute sets (tests switch it off for the reference bits)
ENABLED = True


class Carried:
    """Which variables only carry a value from one compute set to the next (see the module
    docstring), from the compile's linearised walk and live intervals."""

    def __init__(self, lin: Linearizer, iv: Intervals) -> None:
        self._lin = lin
        lin.drop_tables()  # kept for the few fields asked about, not every address
        self._always = iv.always_live
        self._index: tuple[np.ndarray, ...] | None = None
        self._steps: dict[int, set[int]] = {}

    def _build(self) -> tuple[np.ndarray, ...]:
        w = self._lin.w
        if not w.acc_step:
            empty = np.zeros(0, np.int64)
            return empty, empty, empty, np.zeros(len(self._always) + 1, np.int64)
        step, var = np.concatenate(w.acc_step), np.concatenate(w.acc_var)
        kind = np.concatenate(w.acc_kind)
        order = np.lexsort((kind, step, var))  # by variable, step, reads before writes
        step, var, kind = step[order], var[order], kind[order]
        bounds = np.searchsorted(var, np.arange(len(self._always) + 1), side="left")
        for node, s in w.leaf_steps:
            self._steps.setdefault(id(node), set()).add(s)
        return step, var, kind, bounds

    def only_between(self, gather: Gather, writer: N.Node, reader: N.Node) -> bool:
        """True when every variable ``gather`` touches is written by ``writer`` and then
        read by ``reader``, alternately, and accessed by nothing else."""
        if self._index is None:
            self._index = self._build()
        step, _, kind, bounds = self._index
        writes = self._steps.get(id(writer), set())
        reads = self._steps.get(id(reader), set())
        for v in self._lin.variables(gather):
            if self._always[v]:
                return False
            s, k = step[bounds[v] : bounds[v + 1]], kind[bounds[v] : bounds[v + 1]]
            steps, first = np.unique(s, return_index=True)  # (several fields per step)
            low = np.minimum.reduceat(k, first) if s.size else k
            high = np.maximum.reduceat(k, first) if s.size else k
            if steps.size == 0 or steps.size % 2 or np.any(low != high):
                return False
            if np.any(low[0::2] != 1) or np.any(low[1::2] != 0):  # write, read, write, ...
                return False
            if not (set(steps[0::2].tolist()) <= writes and set(steps[1::2].tolist()) <= reads):
                return False
        return True


def fused_step(rt: Any, before: N.OnTileNode, after: N.OnTileNode) -> Callable[[], None] | None:
    """The fused replayed run of compute set ``before`` followed by ``after`` on runtime
    ``rt``, or None (the two then run apart)."""
    carried: Carried | None = getattr(rt.step_plan, "carried", None)
    if not ENABLED or carried is None or rt.host_clock is not None:
        return None
    if before.ccs.dynamic or after.ccs.dynamic or not after.ccs.groups:
        return None
    codelets = {g.vertex_type.codelet for g in after.ccs.groups}
    fuse = getattr(next(iter(codelets)), "fuse", None) if len(codelets) == 1 else None
    if fuse is None:
        return None
    first, second = before.ccs.groups, after.ccs.groups
    for g in (*first, *second):
        g.batch._begin(g, rt.storage, ALL, rt.replica_ids)
    found = fuse([g.batch for g in first], [g.batch for g in second])
    if found is None:
        return None
    run, unstored = found
    for i, name in unstored:
        if not carried.only_between(first[i].gathers[name], before, after):
            return None
    return run


def runs_joined(before: Callable[[], None], after: Callable[[], None]) -> Callable[[], None] | None:
    """One call doing ``before()`` then ``after()``, when ``before`` is a prepared run that
    offers one for ``after`` (``fuse_next``, see ``Codelet.prepare``): two vertex groups'
    prepared runs that are consecutive in a replayed plan (nothing with a data effect runs
    between them), e.g. a reduction's stages reading what the previous one wrote while it
    is still in cache. Unlike :func:`fused_step`, the joined call stores everything the two
    runs store, so no liveness condition applies."""
    fuse = getattr(before, "fuse_next", None)
    return None if fuse is None else fuse(after)
