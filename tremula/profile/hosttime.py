"""Host time: where the simulator's own CPU time goes, step by step (a Tremula extension).

The profiles describe the modelled IPU (cycles, bytes); they never hold host time, so that
equal programs give equal profiles. With the engine option ``autoReport.outputHostTime``
the engine also measures the host CPU time (``time.process_time``) of each program step's
data effect (a compute set's codelets, an exchange's copy, a host transfer) over every run
since load, and autoReport writes it next to the profiles as ``host_time.json``::

    {"format": "tremula.hostTime", "version": 1, "clock": "process_time",
     "steps": [{"type": "OnTileExecute", "name": "layer/matmul", "calls": 200,
                "seconds": 0.0123}, ...]}

one entry per step type and name (steps of one name run by several programs add up), in
the order they first ran. ``tremula profile summary DIR --host-time`` prints it ranked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tremula.errors import ProfileError

#: the file autoReport writes next to ``graph.json`` and ``execution.json``
HOST_TIME_FILE = "host_time.json"
FORMAT = "tremula.hostTime"
VERSION = 1

Row = tuple[int, str, "str | None"]


def host_time_document(steps: Sequence[tuple[str, str, int, float]]) -> dict[str, Any]:
    """The ``host_time.json`` document of ``(type, name, calls, seconds)`` entries."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "clock": "process_time",
        "steps": [
            {"type": t, "name": name, "calls": int(calls), "seconds": float(seconds)}
            for t, name, calls, seconds in steps
        ],
    }


def read_host_time(path: str | Path) -> dict[str, Any]:
    """Read ``host_time.json`` from a report directory, or next to a profile file (or the
    file itself).

    Raises:
        ProfileError: The file is missing (the message says which option writes it), not
            JSON, or not a host-time document.
    """
    path = Path(path)
    if path.is_dir():
        file = path / HOST_TIME_FILE
    else:
        file = path if path.name == HOST_TIME_FILE else path.parent / HOST_TIME_FILE
    if not file.exists():
        raise ProfileError(
            f"{file}: no host time here; run with the engine option "
            '"autoReport.outputHostTime": "true" (and autoReport writing to this directory)'
        )
    try:
        doc = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise ProfileError(f"{file}: cannot read the host time ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ProfileError(f"{file}: not a host-time document (format {FORMAT!r})")
    steps = doc.get("steps")
    keys: dict[str, type | tuple[type, ...]] = {
        "type": str,
        "name": str,
        "calls": int,
        "seconds": (int, float),
    }
    if not isinstance(steps, list) or not all(
        isinstance(s, dict) and all(isinstance(s.get(k), t) for k, t in keys.items()) for s in steps
    ):
        raise ProfileError(
            f"{file}: 'steps' must be a list of {{type, name, calls, seconds}} entries"
        )
    return doc


def host_time_rows(doc: Mapping[str, Any], top: int) -> list[Row]:
    """Summary rows: the total, then the ``top`` steps by host time (all when ``top`` is
    0 or less) with their calls, share of the total and mean time per call."""
    steps = sorted(doc["steps"], key=lambda s: (-float(s["seconds"]), s["type"], s["name"]))
    total = sum(float(s["seconds"]) for s in steps)
    calls = sum(int(s["calls"]) for s in steps)
    rows: list[Row] = [
        (0, f"Clock: {doc.get('clock', 'process_time')} (host CPU seconds, every run)", None),
        (0, "Total", f"{total * 1e3:,.3f} ms ({calls:,} calls of {len(steps):,} steps)"),
    ]
    shown = steps if top <= 0 else steps[:top]
    if shown:
        rows.append((0, "By step (ms, share, calls, mean per call):", None))
    for s in shown:
        seconds, n = float(s["seconds"]), int(s["calls"])
        share = 100.0 * seconds / total if total else 0.0
        mean = seconds / n * 1e6 if n else 0.0
        rows.append(
            (
                1,
                f"{s['type']}: {s['name'] or '(unnamed)'}",
                f"{seconds * 1e3:,.3f} ms  {share:5.1f}%  {n:,} x {mean:,.1f} us",
            )
        )
    if len(shown) < len(steps):
        rest = sum(float(s["seconds"]) for s in steps[len(shown) :])
        rows.append((1, f"({len(steps) - len(shown):,} more steps)", f"{rest * 1e3:,.3f} ms"))
    return rows
