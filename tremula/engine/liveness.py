"""Liveness: linearise the compiled programs into steps, find which variables each step
reads and writes, and derive live intervals (Poplar's liveness: a variable is live from the
step that writes it to the last step that reads it).

A variable is *always live* when its value crosses a program boundary or comes from the
host: it is a constant, has a host handle or initial value, is read before it is written,
is used by more than one control program, or is never used. Otherwise it is live from its
first write to its last access, extended over a whole loop when a loop iteration reads it
before writing it (its value is carried round the loop).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tremula.engine import nodes as N
from tremula.engine.plan import Gather
from tremula.poplar.graph import GraphState
from tremula.poplar.intervals import distinct

#: Spaces up to this many elements get a table of every address's variable while walking
#: (4 bytes an element); larger ones binary-search their variables' starts: the walk asks
#: about each field's runs once, too few questions to pay for a table of a large space.
VAR_TABLE_MAX = 1 << 22


@dataclass(eq=False)
class Walk:
    """The result of linearising the programs."""

    num_steps: int = 0
    acc_step: list[np.ndarray] = field(default_factory=list)
    acc_var: list[np.ndarray] = field(default_factory=list)
    acc_kind: list[np.ndarray] = field(default_factory=list)  # 0 read, 1 write, 2 undef
    acc_prog: list[np.ndarray] = field(default_factory=list)  # control program index
    loops: list[tuple[int, int]] = field(default_factory=list)
    # function id -> call sites (first step, last step, branch path) and code loads
    # (step, branch path); a branch path names the If/Switch branches a step lies in
    calls: dict[int, list[tuple[int, int, tuple[int, ...]]]] = field(default_factory=dict)
    loads: dict[int, list[tuple[int, tuple[int, ...]]]] = field(default_factory=dict)
    leaf_steps: list[tuple[N.Node, int]] = field(default_factory=list)
    tree: list[dict] = field(default_factory=list)  # per control program: nested ranges


class Linearizer:
    def __init__(
        self, state: GraphState, function_roots: list[N.Node], function_ids: dict[int, int]
    ) -> None:
        self.state = state
        self.roots = function_roots
        self.fn_of_pos = {pos: fid for fid, pos in function_ids.items()}
        self.w = Walk()
        self._var_cache: dict[int, tuple[Gather, np.ndarray]] = {}
        self._var_tables: dict[Any, np.ndarray] = {}
        self._var_lists: dict[Any, tuple[np.ndarray, np.ndarray]] = {}
        self._prog = 0
        self._branches: list[int] = []
        self._branch_ids = 0

    def variables(self, g: Gather) -> np.ndarray:
        key = id(g)
        cached = self._var_cache.get(key)
        if cached is not None:
            return cached[1]
        if g.size:  # within one variable (the usual case): its bounds say so
            lo, end = g.addrs.bounds()  # (from its layout where it has one: no runs)
            first, last = self._var_position(g.dtype, np.array([lo, end - 1])).tolist()
            if first == last and first >= 0:
                ids = self._var_arrays(g.dtype)[1][first : first + 1]
                self._var_cache[key] = (g, ids)  # keep g alive so id() stays unique
                return ids
        run_starts, lengths = g.runs()
        p0, p1 = (
            self._var_position(g.dtype, run_starts),
            self._var_position(g.dtype, run_starts + lengths - 1),
        )
        var_ids = self._var_arrays(g.dtype)[1]
        n = var_ids.size
        if p0.size and int(p0.min()) >= 0:
            # the positions some run covers (each run, positions p0..p1: usually one),
            # from the count of runs begun minus those ended at or before each position
            inside = np.bincount(p0, minlength=n + 1)[:n] - np.bincount(p1 + 1, minlength=n + 1)[:n]
            ids = distinct(var_ids[np.cumsum(inside) > 0])
        else:
            count = p1 - p0 + 1  # variables a run crosses (usually one)
            pos = (
                np.repeat(p0, count)
                + np.arange(count.sum())
                - np.repeat(np.cumsum(count) - count, count)
            )
            ids = distinct(var_ids[pos])
        self._var_cache[key] = (g, ids)  # keep g alive so id() stays unique
        return ids

    def _var_arrays(self, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
        """The space's variable starts and ids as arrays (made once per walk)."""
        found = self._var_lists.get(dtype)
        if found is None:
            space = self.state.space(dtype)
            found = self._var_lists[dtype] = (
                np.asarray(space.var_starts, dtype=np.int64),
                np.asarray(space.var_ids, dtype=np.int64),
            )
        return found

    def drop_tables(self) -> None:
        """Free the per-address tables of the walk (:meth:`variables` searches, or builds
        them again, afterwards)."""
        self._var_tables.clear()

    def _var_position(self, dtype: Any, addr: np.ndarray) -> np.ndarray:
        """The position in the space's variable list of the variable holding each address:
        looked up in a table of every address (spaces up to ``VAR_TABLE_MAX`` elements,
        built on first use) or searched."""
        space = self.state.space(dtype)
        var_starts = self._var_arrays(dtype)[0]
        if space.size > VAR_TABLE_MAX or not var_starts.size or var_starts[0] != 0:
            return np.searchsorted(var_starts, addr, side="right") - 1
        table = self._var_tables.get(dtype)
        if table is None:
            counts = np.diff(np.r_[np.minimum(var_starts, space.size), space.size])
            table = self._var_tables[dtype] = np.repeat(
                np.arange(var_starts.size, dtype=np.int32), counts
            )
        return table[addr]

    def add_access(self, step: int, kind: int, g: Gather) -> None:
        ids = self.variables(g)
        if ids.size:
            w = self.w
            w.acc_step.append(np.full(ids.size, step, np.int64))
            w.acc_var.append(ids)
            w.acc_kind.append(np.full(ids.size, kind, np.int64))
            w.acc_prog.append(np.full(ids.size, self._prog, np.int64))

    def leaf(self, node: N.Node) -> int:
        step = self.w.num_steps
        self.w.num_steps += 1
        self.w.leaf_steps.append((node, step))
        kinds = {"r": 0, "w": 1, "u": 2}
        for kind, g in node.accesses():
            self.add_access(step, kinds[kind], g)
        if isinstance(node, N.HostNode) and isinstance(node.action, N.CodeLoad):
            self.w.loads.setdefault(node.action.function, []).append((step, tuple(self._branches)))
        return step

    def walk(self, node: N.Node) -> dict:
        """Visit ``node``; returns its tree entry ``{node, first, last, children}``."""
        entry: dict = {"node": node, "first": self.w.num_steps, "children": []}
        if isinstance(node, N.CallNode):
            fid = self.fn_of_pos[node.function]
            first = self.w.num_steps
            entry["children"].append(self.walk(node.callee))
            site = (first, max(first, self.w.num_steps - 1), tuple(self._branches))
            self.w.calls.setdefault(fid, []).append(site)
        elif isinstance(node, (N.RepeatNode, N.RepeatWhileNode)):
            if isinstance(node, N.RepeatWhileNode):
                self.leaf(node)  # the predicate read
            start = self.w.num_steps
            entry["children"] = [self.walk(c) for c in node.children()]
            self.w.loops.append((start, max(start, self.w.num_steps - 1)))
        elif isinstance(node, (N.IfNode, N.SwitchNode)):
            self.leaf(node)
            entry["children"] = [self._branch(c) for c in node.children()]
        elif node.children():
            entry["children"] = [self.walk(c) for c in node.children()]
        else:
            self.leaf(node)
        entry["last"] = max(entry["first"], self.w.num_steps - 1)
        return entry

    def _branch(self, node: N.Node) -> dict:
        self._branch_ids += 1
        self._branches.append(self._branch_ids)
        try:
            return self.walk(node)
        finally:
            self._branches.pop()

    def run(self, control_roots: list[N.Node]) -> Walk:
        for i, root in enumerate(control_roots):
            self._prog = i
            self.w.tree.append(self.walk(root))
        return self.w


@dataclass(eq=False)
class Intervals:
    always_live: np.ndarray  # [num_vars] bool
    start: np.ndarray  # [num_vars] first live step (valid where not always live)
    end: np.ndarray  # [num_vars] last live step


def intervals(state: GraphState, w: Walk) -> Intervals:
    nv = len(state.variables)
    always = np.zeros(nv, dtype=bool)
    start = np.zeros(nv, dtype=np.int64)
    end = np.zeros(nv, dtype=np.int64)
    for v in state.variables:
        if v.is_constant:
            always[v.id] = True
    for handles in (state.host_writes, state.host_reads):
        for t in handles.values():
            always[state.variable_ids_of(t)] = True
    for t, _ in state.initial_values:
        always[state.variable_ids_of(t)] = True
    if not w.acc_step:
        always[:] = True
        return Intervals(always, start, end)
    step = np.concatenate(w.acc_step)
    var = np.concatenate(w.acc_var)
    kind = np.concatenate(w.acc_kind)
    prog = np.concatenate(w.acc_prog)
    # order accesses by (var, step, kind): reads before writes in one step (conservative)
    order = np.lexsort((kind, step, var))
    step, var, kind, prog = step[order], var[order], kind[order], prog[order]
    used = np.zeros(nv, dtype=bool)
    used[var] = True
    always |= ~used
    first_idx = np.searchsorted(var, np.arange(nv), side="left")
    last_idx = np.searchsorted(var, np.arange(nv), side="right") - 1
    u = np.flatnonzero(used)
    always[u[kind[first_idx[u]] == 0]] = True  # read before written
    progs_min = np.full(nv, np.iinfo(np.int64).max)
    progs_max = np.full(nv, -1)
    np.minimum.at(progs_min, var, prog)
    np.maximum.at(progs_max, var, prog)
    always |= used & (progs_min != progs_max)
    start[u] = step[first_idx[u]]
    end[u] = step[last_idx[u]]
    for a, b in w.loops:  # loop-carried values live across the whole loop
        inside = (step >= a) & (step <= b)
        if not inside.any():
            continue
        lv, lk = var[inside], kind[inside]
        uniq, first = np.unique(lv, return_index=True)
        carried = uniq[lk[first] == 0]
        start[carried] = np.minimum(start[carried], a)
        end[carried] = np.maximum(end[carried], b)
    return Intervals(always, start, end)
