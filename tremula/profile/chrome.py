"""Export a profile's execution steps as Chrome Trace Event JSON (also read by Perfetto).

The mapping:

* one process (``pid``) per IPU, named by a ``process_name`` metadata event;
* five thread lanes (``tid``) per IPU: ``Program steps`` (every step), then ``Compute``,
  ``Exchange``, ``Sync`` and ``StreamCopy`` (each step again, in the lane of its kind);
* one complete (``X``) event per step and lane, with ``ts`` and ``dur`` in microseconds
  (cycles divided by the clock in MHz) and ``args`` holding all the step's fields, raw
  cycles included.

A step goes to the IPUs whose tiles take part in it, as the graph profile tells: the compute
set's estimated cycles, or the exchange's bytes and cycles. Syncs, and steps the graph profile
cannot place, go to every IPU.

Counters (``C`` events) go to one more process, ``Counters (all IPUs)``: at the start of
every step, the live memory (always-live bytes and the not-always-live bytes of the step's
program, from the graph profile's liveness) and the step's active tiles.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tremula.profile.liveness import liveness_steps

#: The thread lanes of each IPU, in ``tid`` order.
LANES: tuple[str, ...] = ("Program steps", "Compute", "Exchange", "Sync", "StreamCopy")
#: The lane of each step type (besides ``Program steps``).
STEP_LANES: dict[str, str] = {
    "OnTileExecute": "Compute",
    "DoExchange": "Exchange",
    "GlobalExchange": "Exchange",
    "CopySharedStructure": "Exchange",
    "Sync": "Sync",
    "StreamCopy": "StreamCopy",
}
#: Step field -> (graph section, per-tile arrays showing which tiles take part).
_PARTICIPATION: dict[str, tuple[str, tuple[str, ...]]] = {
    "computeSet": ("computeSets", ("cycleEstimates", "cyclesByTile")),
    "exchange": ("exchanges", ("bytesReceivedByTile", "bytesSentByTile", "cyclesByTile")),
    "externalExchange": (
        "externalExchanges",
        ("bytesReceivedByTile", "bytesSentByTile", "estimatedCyclesByTile"),
    ),
    "hostExchange": (
        "hostExchanges",
        ("bytesReceivedByTile", "bytesSentByTile", "estimatedCyclesByTile"),
    ),
}


def to_chrome_trace(graph: Mapping[str, Any], execution: Mapping[str, Any]) -> dict[str, Any]:
    """Build a Chrome trace of the execution steps.

    Args:
        graph: The graph profile (target, and the tables that place steps on IPUs).
        execution: The execution profile; without ``simulation`` the trace has only the
            process and lane metadata.

    Returns:
        ``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}``, ready for
        ``json.dump``. The events are in a deterministic order: metadata, then each step's
        events in step order.
    """
    target = graph["target"]
    num_ipus = int(target["numIPUs"])
    mhz = float(target["clockFrequency"]) / 1e6
    events = _metadata_events(target)
    simulation = execution.get("simulation") or {}
    locator = IpuLocator(graph, num_ipus)
    steps = simulation.get("steps", ())
    for step in steps:
        for ipu in locator.ipus(step):
            events += _step_events(step, ipu, mhz)
    if steps:
        events += _counter_events(graph, steps, num_ipus, mhz)
    other = {
        "profilerMode": execution.get("profilerMode"),
        "targetType": target.get("type"),
        "ipuVersion": target.get("ipuVersion"),
        "clockFrequency": target["clockFrequency"],
        "numTiles": target.get("numTiles"),
        "cycles": simulation.get("cycles"),
    }
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": other}


def _metadata_events(target: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Process and thread names and sort orders for every IPU."""
    kind = f"{target.get('type')}, {target.get('ipuVersion')}"
    events: list[dict[str, Any]] = []
    for ipu in range(int(target["numIPUs"])):
        events += [
            _meta("process_name", ipu, 0, {"name": f"IPU {ipu} ({kind})"}),
            _meta("process_sort_index", ipu, 0, {"sort_index": ipu}),
        ]
        for tid, lane in enumerate(LANES):
            events += [
                _meta("thread_name", ipu, tid, {"name": lane}),
                _meta("thread_sort_index", ipu, tid, {"sort_index": tid}),
            ]
    return events


#: The counters' process name (its ``pid`` is ``numIPUs``, after the IPUs').
COUNTERS_PROCESS = "Counters (all IPUs)"


def _counter_events(
    graph: Mapping[str, Any], steps: Any, num_ipus: int, mhz: float
) -> list[dict[str, Any]]:
    """Live memory and active tiles at the start of each step, on the counters' process."""
    pid = num_ipus
    events = [
        _meta("process_name", pid, 0, {"name": COUNTERS_PROCESS}),
        _meta("process_sort_index", pid, 0, {"sort_index": pid}),
    ]
    always, by_program = _live_bytes(graph)
    for step in steps:
        ts = step["cyclesFrom"] / mhz
        if by_program is not None:
            live = {"alwaysLive": always, "notAlwaysLive": by_program.get(step["program"], 0)}
            events.append(_counter("Live memory (bytes)", pid, ts, live))
        events.append(_counter("Active tiles", pid, ts, {"tiles": step["activeTiles"]}))
    return events


def _counter(name: str, pid: int, ts: float, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "cat": "counter", "ph": "C", "ts": ts, "pid": pid, "tid": 0, "args": args}


def _live_bytes(graph: Mapping[str, Any]) -> tuple[int, dict[int, int] | None]:
    """Always-live bytes, and the not-always-live bytes of each program (its largest over
    the liveness steps it appears at); None when the profile has no liveness."""
    try:
        programs, amounts, _ = liveness_steps(graph)
        always = int(graph["memory"]["liveness"]["alwaysLive"]["bytes"])
    except (KeyError, TypeError, ValueError, IndexError):
        return 0, None
    by_program: dict[int, int] = {}
    for pid, amount in zip(programs.tolist(), amounts.tolist()):
        by_program[pid] = max(by_program.get(pid, 0), amount)
    return always, by_program


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args}


def _step_events(step: Mapping[str, Any], ipu: int, mhz: float) -> list[dict[str, Any]]:
    """The step's event on the ``Program steps`` lane and on the lane of its kind."""
    stype = step["type"]
    title = step.get("name") or f"{stype} (program {step['program']})"
    lanes = [LANES[0]] + ([STEP_LANES[stype]] if stype in STEP_LANES else [])
    return [
        {
            "name": title,
            "cat": f"step,{stype}",
            "ph": "X",
            "ts": step["cyclesFrom"] / mhz,
            "dur": step["cycles"] / mhz,
            "pid": ipu,
            "tid": LANES.index(lane),
            "args": dict(step),
        }
        for lane in lanes
    ]


class IpuLocator:
    """Finds the IPUs whose tiles take part in a step, from the graph profile's tables."""

    def __init__(self, graph: Mapping[str, Any], num_ipus: int) -> None:
        self.graph = graph
        self.num_ipus = num_ipus
        self.all = list(range(num_ipus))
        self._masks: dict[str, np.ndarray | None] = {}

    def ipus(self, step: Mapping[str, Any]) -> list[int]:
        """The IPU indices to draw ``step`` on."""
        if self.num_ipus == 1:
            return self.all
        for key in _PARTICIPATION:
            index = step.get(key)
            if index is None:
                continue
            mask = self._mask(key)
            if mask is None or not 0 <= index < len(mask) or not mask[index].any():
                return self.all
            return [int(i) for i in np.flatnonzero(mask[index])]
        return self.all

    def _mask(self, key: str) -> np.ndarray | None:
        """``[entry][ipu]``: does any tile of the IPU take part in the entry? (cached)"""
        if key not in self._masks:
            self._masks[key] = self._build_mask(key)
        return self._masks[key]

    def _build_mask(self, key: str) -> np.ndarray | None:
        section_name, fields = _PARTICIPATION[key]
        section = self.graph.get(section_name) or {}
        if key == "computeSet":
            section, fields = section.get(fields[0]) or {}, fields[1:]
        total = None
        for field in fields:
            if field not in section:
                continue
            arr = np.asarray(section[field], np.int64)
            if total is not None and arr.shape != total.shape:
                return None
            total = arr if total is None else total + arr
        if total is None or total.ndim != 2 or total.shape[1] % self.num_ipus:
            return None
        rows, tiles = total.shape
        per_ipu = total.reshape(rows, self.num_ipus, tiles // self.num_ipus)
        return np.asarray((per_ipu > 0).any(axis=2))
