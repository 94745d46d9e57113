"""Memory per tile: by category, in the non-interleaved, interleaved and overflowed regions,
with and without alignment gaps, always-live and not-always-live (peak over steps).

Code and vertex state go in the non-interleaved region (instructions are fetched only from
there). Data fills what is left of it, then the interleaved region, then overflows. A
tile whose footprint including gaps exceeds its memory makes compilation fail with
:class:`OutOfMemoryError` unless ``debug.allowOutOfMemory`` is set.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tremula.engine import nodes as N
from tremula.engine.compiler import StepPlan
from tremula.engine.liveness import Intervals, Walk
from tremula.engine.vartable import var_tile_counts, variable_table
from tremula.poplar.intervals import distinct
from tremula.profile.schema import (
    MEMORY_CATEGORIES,
    OVERLAP_KINDS,
    VERTEX_MEMORY_KEYS,
    VERTEX_MEMORY_PARTS,
)

CATEGORIES = MEMORY_CATEGORIES  # the profile format's list, in its order
CODE = (
    "vertexCode",
    "controlCode",
    "internalExchangeCode",
    "globalExchangeCode",
    "hostExchangeCode",
    "hostExchangePacketHeader",
    "stack",
    "vertexInstanceState",
    "vectorListDescriptor",
    "vertexFieldData",
    "controlId",
)
#: The profile's memory regions (``MEMORY_REGIONS``) in the order data is placed in them.
REGIONS = ("nonInterleaved", "interleaved", "overflowed")


@dataclass(eq=False)
class Entries:
    """Not-always-live allocations: bytes on a tile over steps ``[start, end]``."""

    tile: list[np.ndarray] = field(default_factory=list)
    start: list[np.ndarray] = field(default_factory=list)
    end: list[np.ndarray] = field(default_factory=list)
    raw: list[np.ndarray] = field(default_factory=list)
    aligned: list[np.ndarray] = field(default_factory=list)
    cat: list[np.ndarray] = field(default_factory=list)

    def add(self, tile, start, end, raw, aligned, cat: int) -> None:
        k = np.size(tile)
        for lst, v in (
            (self.tile, tile),
            (self.start, start),
            (self.end, end),
            (self.raw, raw),
            (self.aligned, aligned),
            (self.cat, cat),
        ):
            lst.append(np.broadcast_to(np.asarray(v, dtype=np.int64), (k,)))

    def arrays(self) -> tuple[np.ndarray, ...]:
        if not self.tile:
            z = np.zeros(0, dtype=np.int64)
            return z, z, z, z, z, z
        return tuple(
            np.concatenate(x)
            for x in (self.tile, self.start, self.end, self.raw, self.aligned, self.cat)
        )


@dataclass(eq=False)
class MemoryReport:
    by_category: dict[
        str, dict[str, dict[str, np.ndarray]]
    ]  # cat -> region -> {nonOverlapped, overlapped}
    by_tile: dict[str, np.ndarray]
    always_live: np.ndarray
    not_always_live_peak: np.ndarray  # per tile, excluding gaps
    not_always_live_at_peak: np.ndarray  # per tile, at the step of the global peak
    step_totals: np.ndarray  # [step] not-always-live bytes over all tiles
    by_compute_set: dict[str, list[np.ndarray]]
    by_vertex_type: dict[str, list[np.ndarray]]
    vertex_types: list[str]
    vertex_type_sizes: list[int]
    step_programs: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # [step]
    variables: dict[str, list] = field(default_factory=dict)  # the profile's ``variables``


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping ``[start, end]`` step spans merged into disjoint ones."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _align(x: np.ndarray, a: int) -> np.ndarray:
    return -(-x // a) * a


class MemoryModel:
    def __init__(self, sp: StepPlan, walk: Walk, iv: Intervals) -> None:
        self.step_plan = sp
        self.state = sp.state
        self.target = sp.target
        self.walk = walk
        self.iv = iv
        T = self.target.num_tiles
        self.T = T
        self.al_raw = {c: np.zeros(T, np.int64) for c in CATEGORIES}
        self.al_aligned = {c: np.zeros(T, np.int64) for c in CATEGORIES}
        self.nal = Entries()
        #: each space's (variable, tile, elements), shared with the variable table
        self.tile_counts: dict = {}

    def add_always(self, cat: str, raw: np.ndarray) -> None:
        self.al_raw[cat] += raw
        self.al_aligned[cat] += _align(raw, self.target.alignment_bytes)

    # ---- data ----
    def variables(self) -> None:
        st, T, a = self.state, self.T, self.target.alignment_bytes
        constant = np.array([v.is_constant for v in st.variables], dtype=bool)  # by id
        layout, ids = self.step_plan.layout, self.step_plan.space_ids
        for dtype, space in st.spaces.items():
            if space.size == 0:
                continue
            segments = layout.seg_start[ids[dtype]]
            var, tile, counts = self.tile_counts[dtype] = var_tile_counts(space, T, segments)
            raw = counts * dtype.size
            aligned = _align(raw, a)
            const = constant[var] if var.size else np.zeros(0, dtype=bool)
            always = self.iv.always_live[var]
            for cat, mask in (("constant", const), ("variable", always & ~const)):
                self.al_raw[cat] += np.bincount(tile[mask], raw[mask], T).astype(np.int64)
                self.al_aligned[cat] += np.bincount(tile[mask], aligned[mask], T).astype(np.int64)
            nal = ~always
            self.nal.add(
                tile[nal],
                self.iv.start[var[nal]],
                self.iv.end[var[nal]],
                raw[nal],
                aligned[nal],
                CATEGORIES.index("variable"),
            )

    def messages(self) -> None:
        """Receive buffers of compute-set exchanges and of global exchanges (a Copy's too)
        live around their exchange step."""
        cat = CATEGORIES.index("message")
        for node, step in self.walk.leaf_steps:
            if isinstance(node, N.ExchangeNode) and (
                node.copy is None or node.kind == "GlobalExchange"
            ):
                plan = (
                    self.step_plan.exchanges
                    if node.kind == "DoExchange"
                    else self.step_plan.external_exchanges
                )[node.exchange]
                tiles = np.flatnonzero(plan.bytes_received)
                raw = plan.bytes_received[tiles]
                post = node.name.endswith("ExchangePost")
                s0, s1 = (step - 1, step) if post else (step, step + 1)
                self.nal.add(
                    tiles, max(s0, 0), s1, raw, _align(raw, self.target.alignment_bytes), cat
                )

    # ---- code and state ----
    def code(self) -> None:
        """Code per tile: the vertex code of each codelet type present, control code per
        program, exchange code and host-exchange headers; functions with a function buffer
        count from their loads (:meth:`_function_code`)."""
        sp, T, tg = self.step_plan, self.T, self.target
        buffered = set(self.state.function_buffers)
        in_buffered = self._nodes_in_buffered(buffered)
        types_mask: dict[str, np.ndarray] = {}
        program_count = 0
        for node in sp.nodes:
            if id(node) in in_buffered:
                continue
            program_count += 1
            if isinstance(node, N.OnTileNode):
                for g in node.ccs.groups:
                    m = types_mask.setdefault(g.vertex_type.name, np.zeros(T, bool))
                    m[g.tiles] = True
        for name, m in types_mask.items():
            self.add_always("vertexCode", m * self.state.codelets.resolve(name).codelet.code_bytes)
        self.add_always(
            "controlCode", np.full(T, program_count * tg.control_code_bytes_per_program)
        )
        for plan in sp.exchanges:
            self.add_always("internalExchangeCode", plan.code_bytes)
        for plan in sp.external_exchanges:
            self.add_always("globalExchangeCode", plan.code_bytes)
        for hx in sp.host_exchanges:
            active = (hx.bytes_sent + hx.bytes_received) > 0
            self.add_always("hostExchangeCode", active * tg.host_exchange_code_bytes_per_region)
            self.add_always("hostExchangePacketHeader", active * 8)
        self._function_code(buffered)

    def vertex_state(self) -> None:
        """Vertex instance state, vector-list descriptors and field data of every vertex,
        and the worker and supervisor stacks of every tile that runs a vertex."""
        sp, T, tg = self.step_plan, self.T, self.target
        used = np.zeros(T, bool)
        for ccs in sp.compute_sets:
            for g in ccs.groups:
                used[g.tiles] = True
                self.add_always(
                    "vertexInstanceState", np.bincount(g.tiles, g.state_bytes, T).astype(np.int64)
                )
                self.add_always(
                    "vectorListDescriptor",
                    np.bincount(g.tiles, g.descriptor_bytes, T).astype(np.int64),
                )
                self.add_always(
                    "vertexFieldData", np.bincount(g.tiles, g.field_data_bytes, T).astype(np.int64)
                )
        stack = tg.num_worker_contexts * tg.stack_bytes_per_worker + tg.supervisor_stack_bytes
        self.add_always("stack", used * stack)

    def _nodes_in_buffered(self, buffered: set[int]) -> set[int]:
        out: set[int] = set()
        for fid in buffered:
            pos = self.step_plan.function_index.get(fid)
            if pos is None:
                continue
            stack = [self.step_plan.function_roots[pos]]
            while stack:
                n = stack.pop()
                out.add(id(n))
                if not isinstance(n, N.CallNode):
                    stack.extend(n.children())
        return out

    def _function_code(self, buffered: set[int]) -> None:
        """Code kept in streaming memory (a function with a function buffer) is live from
        the latest load before each call to that call, dead in between (PopXL's user guide,
        "Code loading": code is live only between a load and the calls it serves). A load
        inside an If/Switch branch counts only for calls in that branch: after the branches
        merge the compiler must assume it did not happen (the pessimistic rule). A call with
        no load before it has the code live from the start."""
        cat = CATEGORIES.index("vertexCode")
        for fid in sorted(buffered):
            code = self.step_plan.function_code.get(fid)
            sites = self.walk.calls.get(fid, [])
            if code is None or not sites:
                continue
            loads = self.walk.loads.get(fid, [])
            spans = []
            for first, last, path in sites:
                valid = [s for s, p in loads if s <= first and path[: len(p)] == p]
                spans.append((max(valid) if valid else 0, last))
            tiles = np.flatnonzero(code)
            for start, end in _merge(spans):
                self.nal.add(
                    tiles,
                    start,
                    end,
                    code[tiles],
                    _align(code[tiles], self.target.alignment_bytes),
                    cat,
                )

    # ---- combine ----
    def sweep(
        self, tile: np.ndarray, start: np.ndarray, end: np.ndarray, amount: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per-tile peak of live bytes, and the step at which each tile peaks."""
        T = self.T
        peak = np.zeros(T, np.int64)
        at = np.zeros(T, np.int64)
        if tile.size == 0:
            return peak, at
        ev_tile = np.r_[tile, tile]
        ev_step = np.r_[start, end + 1]
        ev_amt = np.r_[amount, -amount]
        order = np.lexsort((ev_amt > 0, ev_step, ev_tile))  # frees before allocations
        ev_tile, ev_step, ev_amt = ev_tile[order], ev_step[order], ev_amt[order]
        live = np.cumsum(ev_amt)
        seg = np.flatnonzero(np.r_[True, ev_tile[1:] != ev_tile[:-1]])
        tiles = ev_tile[seg]
        seg_peak = np.maximum.reduceat(live, seg)
        peak[tiles] = seg_peak
        seg_id = np.repeat(np.arange(seg.size), np.diff(np.r_[seg, live.size]))
        idx = np.flatnonzero(live == seg_peak[seg_id])
        _, first = np.unique(seg_id[idx], return_index=True)
        at[tiles] = ev_step[idx[first]]
        return peak, at

    def build(self) -> MemoryReport:
        self.variables()
        self.messages()
        self.code()
        self.vertex_state()
        T = self.T
        tile, start, end, raw, aligned, cat = self.nal.arrays()
        peak, at = self.sweep(tile, start, end, raw)
        live_at = (start <= at[tile]) & (at[tile] <= end)
        nal_raw = {c: np.zeros(T, np.int64) for c in CATEGORIES}
        nal_aligned = {c: np.zeros(T, np.int64) for c in CATEGORIES}
        for ci in distinct(cat):
            m = live_at & (cat == ci)
            c = CATEGORIES[int(ci)]
            nal_raw[c] = np.bincount(tile[m], raw[m], T).astype(np.int64)
            nal_aligned[c] = np.bincount(tile[m], aligned[m], T).astype(np.int64)
        by_category, by_tile = self._regions(nal_raw, nal_aligned)
        steps = max(self.walk.num_steps, 1)
        diff = np.zeros(steps + 1, np.int64)
        np.add.at(diff, np.minimum(start, steps), raw)
        np.add.at(diff, np.minimum(end + 1, steps), -raw)
        totals = np.cumsum(diff)[:steps]
        gpeak = int(np.argmax(totals)) if totals.size else 0
        at_peak = np.bincount(
            tile[(start <= gpeak) & (gpeak <= end)], raw[(start <= gpeak) & (gpeak <= end)], T
        ).astype(np.int64)
        always = np.add.reduce(list(self.al_raw.values()))
        bcs, bvt, names, sizes = self._per_cs_and_type()
        step_programs = np.zeros(self.walk.num_steps, np.int64)
        for node, step in self.walk.leaf_steps:
            step_programs[step] = node.pid
        return MemoryReport(
            by_category, by_tile, always, peak, at_peak, totals, bcs, bvt, names, sizes,
            step_programs, variable_table(self.state, self.iv, T, self.tile_counts),
        )  # fmt: skip

    def _regions(self, nal_raw: dict, nal_aligned: dict) -> tuple[dict, dict]:
        tg, T = self.target, self.T
        order = (
            [(c, False) for c in CODE]
            + [(c, True) for c in CODE]
            + [(c, False) for c in CATEGORIES if c not in CODE]
            + [(c, True) for c in CATEGORIES if c not in CODE]
        )
        by_cat = {
            c: {r: {k: np.zeros(T, np.int64) for k in OVERLAP_KINDS} for r in REGIONS}
            for c in CATEGORIES
        }
        by_tile = {}
        for label, al, nal in (
            ("", self.al_raw, nal_raw),
            ("IncludingGaps", self.al_aligned, nal_aligned),
        ):
            cap_ni = np.full(T, tg.non_interleaved_bytes, np.int64)
            cap_il = np.full(T, tg.interleaved_bytes, np.int64)
            sums = {r: np.zeros(T, np.int64) for r in REGIONS}
            for c, overlapped in order:
                amount = (nal if overlapped else al)[c]
                if not amount.any():
                    continue
                a_ni = np.minimum(amount, cap_ni)
                cap_ni -= a_ni
                rest = amount - a_ni
                if c in CODE:
                    a_il = np.zeros(T, np.int64)
                else:
                    a_il = np.minimum(rest, cap_il)
                    cap_il -= a_il
                a_ov = rest - a_il
                for r, a in zip(REGIONS, (a_ni, a_il, a_ov)):
                    sums[r] += a
                    if not label:
                        by_cat[c][r]["overlapped" if overlapped else "nonOverlapped"] += a
            for r in REGIONS:
                by_tile[r + label] = sums[r]
            if label:
                il = sums["interleaved"]
                by_tile["totalIncludingGaps"] = (
                    np.where(il > 0, tg.interleaved_region_start + il, sums["nonInterleaved"])
                    + sums["overflowed"]
                )
            else:
                by_tile["total"] = sums["nonInterleaved"] + sums["interleaved"] + sums["overflowed"]
        return by_cat, by_tile

    def _per_cs_and_type(self) -> tuple[dict, dict, list[str], list[int]]:
        T = self.T
        names: list[str] = []
        sizes: list[int] = []
        keys = VERTEX_MEMORY_KEYS
        by_cs: dict[str, list[np.ndarray]] = {k: [] for k in keys}
        by_type: dict[str, list[np.ndarray]] = {k: [] for k in keys}
        type_rows: dict[str, dict[str, np.ndarray]] = {}
        for ccs in self.step_plan.compute_sets:
            row = {k: np.zeros(T, np.int64) for k in keys}
            for g in ccs.groups:
                name = g.vertex_type.name
                if name not in type_rows:
                    names.append(name)
                    sizes.append(int(g.state_bytes[0]) if g.n else 0)
                    type_rows[name] = {k: np.zeros(T, np.int64) for k in keys}
                code = np.zeros(T, np.int64)
                code[distinct(g.tiles)] = g.vertex_type.codelet.code_bytes
                parts = {
                    "codeBytes": code,
                    "vertexDataBytes": np.bincount(g.tiles, g.state_bytes - g.edge_ptr_bytes, T),
                    "descriptorBytes": np.bincount(g.tiles, g.descriptor_bytes, T),
                    "edgePtrBytes": np.bincount(g.tiles, g.edge_ptr_bytes, T),
                }
                for k, v in parts.items():
                    v = v.astype(np.int64)
                    row[k] += v
                    tr = type_rows[name]
                    tr[k] = np.maximum(tr[k], v) if k == "codeBytes" else tr[k] + v
            row["totalBytes"] = np.add.reduce([row[k] for k in VERTEX_MEMORY_PARTS])
            for k in keys:
                by_cs[k].append(row[k])
        for name in names:
            tr = type_rows[name]
            tr["totalBytes"] = np.add.reduce([tr[k] for k in VERTEX_MEMORY_PARTS])
            for k in keys:
                by_type[k].append(tr[k])
        return by_cs, by_type, names, sizes
