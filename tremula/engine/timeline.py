"""The BSP timeline: one clock per tile, advanced by compute, exchange, sync and host steps
. No wall clock is read: the same run
gives the same cycles.

Each kind of step has static per-tile durations computed at compile time (a
:class:`StepInfo`); the run only moves the clocks and appends a small record per step.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from tremula.profile.schema import STEP_TILE_CYCLES, TILE_CYCLES_KEYS, StepRecord
from tremula.target import Target

Step = tuple["StepInfo", int, int, int, "float | None"]  # info, start, end, overlapped, balance


class StepLog:
    """The record of steps, in order. A replayed program adds its steps as one chunk shifted
    by a base cycle (:meth:`add_shifted`); chunks are expanded only when the log is read, so
    a replayed run costs one append and long runs keep one entry per replay."""

    __slots__ = ("_chunks", "_flat")

    def __init__(self) -> None:
        self._flat: list[Step] = []
        self._chunks: list[tuple[int, list[Step]]] = []

    def append(self, step: Step) -> None:
        if self._chunks:
            self._flush()
        self._flat.append(step)

    def add_shifted(self, base: int, steps: list[Step]) -> None:
        """Append ``steps`` (recorded relative to cycle 0) shifted by ``base`` cycles."""
        if steps:
            self._chunks.append((base, steps))

    def _flush(self) -> None:
        flat = self._flat
        for base, steps in self._chunks:
            flat.extend((i, s + base, e + base, o, b) for i, s, e, o, b in steps)
        self._chunks.clear()

    def __len__(self) -> int:
        self._flush()
        return len(self._flat)

    def __iter__(self) -> Iterator[Step]:
        self._flush()
        return iter(self._flat)

    def __getitem__(self, index: Any) -> Any:
        self._flush()
        return self._flat[index]


def tile_balances(d: np.ndarray, n: int) -> tuple[float, float]:
    """``tileBalance`` and ``activeTileBalance`` of per-tile cycles ``d`` on ``n`` tiles."""
    peak = int(d.max(initial=0))
    if peak == 0:
        return 1.0, 1.0
    active = int(np.count_nonzero(d))
    return float(d.sum() / (n * peak)), float(d.sum() / (active * peak))


@dataclass(eq=False)
class StepInfo:
    """What is known about a step before the run: its profile record (type, program, name
    and the fields of its type, :class:`tremula.profile.schema.StepRecord`) and the cycles
    of each active tile (``tiles`` and ``cycles`` aligned)."""

    record: StepRecord
    tiles: np.ndarray
    cycles: np.ndarray
    active_cycles: int = 0  # for tileCycles.activeCompute
    lockstep: bool = False  # statically scheduled: all tiles end together

    def __post_init__(self) -> None:
        self.total = int(self.cycles.sum())

    @property
    def type(self) -> str:
        return self.record.type

    @property
    def sync_type(self) -> str:
        return self.record.sync_type or ""


class Timeline:
    """Per-tile clocks plus the record of steps and of the program trace."""

    def __init__(self, target: Target, record: bool = True) -> None:
        self.target = target
        self.t = np.zeros(target.num_tiles, dtype=np.int64)
        self.record = record
        self.rel = np.tile(target.relative_sync_delays(), target.num_ipus)
        self.reset()

    def reset(self) -> None:
        self.steps = StepLog()
        self.trace: list[int] = []
        self.tile_cycles = dict.fromkeys(TILE_CYCLES_KEYS, 0)
        self.cs_cycles: dict[int, np.ndarray] = {}
        self.prev_to = 0
        self.t[:] = 0

    def _push(
        self, info: StepInfo, start: int, end: int, total: int, balance: float | None = None
    ) -> None:
        overlapped = max(0, self.prev_to - start)
        self.prev_to = max(self.prev_to, end)
        self.tile_cycles[STEP_TILE_CYCLES[info.type]] += total
        if self.record:
            self.steps.append((info, start, end, overlapped, balance))

    def program(self, pid: int) -> None:
        if self.record:
            self.trace.append(pid)

    def compute(self, info: StepInfo) -> None:
        """Tiles run their vertices; tiles without vertices do not move."""
        if info.tiles.size == 0:
            return
        start = self.t[info.tiles]
        end = start + info.cycles
        self.t[info.tiles] = end
        self._push(info, int(start.min()), int(end.max()), info.total)
        self.tile_cycles["activeCompute"] += info.active_cycles

    def lockstep(self, info: StepInfo) -> None:
        """An exchange or host transfer: statically scheduled, so every participating tile
        ends when the slowest one does."""
        if info.tiles.size == 0:
            return
        start = self.t[info.tiles]
        end = int((start + info.cycles).max())
        self.t[info.tiles] = end
        self._push(info, int(start.min()), end, info.total)

    def sync(self, info: StepInfo) -> None:
        """Internal: per IPU, every tile waits for the last, then is released after its own
        sync delay. External: across all IPUs, with the global sync latency."""
        tg, t = self.target, self.t
        lo, before_sum = int(t.min()), int(t.sum())
        if info.sync_type == "External" or tg.num_ipus == 1:
            delay = tg.global_sync_delay if info.sync_type == "External" else tg.min_sync_delay
            release = int(t.max()) + delay
            peak = release + int((self.rel - t).max())
            np.add(self.rel, release, out=t)
        else:
            before = t.copy()
            per_ipu = before.reshape(tg.num_ipus, tg.tiles_per_ipu).max(axis=1)
            t[:] = np.repeat(per_ipu, tg.tiles_per_ipu) + tg.min_sync_delay + self.rel
            peak = int((t - before).max(initial=0))
        total = int(t.sum()) - before_sum
        balance = total / (t.size * peak) if peak else 1.0
        self._push(info, lo, int(t.max()), total, balance)

    def run(self, info: StepInfo) -> None:
        if info.type == "Sync":
            self.sync(info)
        elif info.lockstep:
            self.lockstep(info)
        else:
            self.compute(info)

    @property
    def cycles(self) -> int:
        return int(self.t.max(initial=0))


class NullTimeline(Timeline):
    """For the CPU target: no cycle model, nothing recorded."""

    def __init__(self, target: Target) -> None:
        super().__init__(target, record=False)

    def run(self, info: StepInfo) -> None:
        return None

    def program(self, pid: int) -> None:
        return None
