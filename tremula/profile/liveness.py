"""Not-always-live memory per program step, read from a graph profile.

The engine linearises the programs into steps (functions inlined at each call site) and
sweeps live ranges over them. A Tremula graph profile may carry the result as the
``memory.liveness.programSteps`` extension (``program`` and ``notAlwaysLiveBytes`` per
step, FORMAT.md); any Poplar 1.x profile carries the ``notAlwaysLive.byProgram`` tree, whose
leaves are the steps, in order, each with its bytes. :func:`liveness_steps` reads the first
when present, else the second.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

#: Program types that are containers in the ``byProgram`` tree (not steps of their own).
_CONTAINERS = frozenset(
    ("Sequence", "Repeat", "RepeatWhileTrue", "RepeatWhileFalse", "If", "IfElse", "Switch",
     "Call")
)  # fmt: skip


def liveness_steps(graph: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, str]:
    """Program and not-always-live bytes (summed over tiles) of each liveness step.

    Args:
        graph: A graph profile.

    Returns:
        ``(programs, bytes, source)``: two int64 arrays, one entry per step, and
        ``"programSteps"`` or ``"byProgram"`` (where they were read from).

    Raises:
        KeyError: If the profile has no liveness section.
    """
    live = graph["memory"]["liveness"]["notAlwaysLive"]
    steps = graph["memory"]["liveness"].get("programSteps")
    if isinstance(steps, Mapping):
        programs = np.asarray(steps["program"], np.int64)
        amounts = np.asarray(steps["notAlwaysLiveBytes"], np.int64)
        return programs, amounts, "programSteps"
    programs_table = graph.get("programs", [])
    leaves: list[tuple[int, int]] = []
    stack = list(reversed(live["byProgram"]))
    while stack:
        node = stack.pop()
        children = node.get("children") or []
        pid = int(node["program"])
        ptype = programs_table[pid].get("type") if 0 <= pid < len(programs_table) else None
        if children:
            stack.extend(reversed(children))
        elif ptype not in _CONTAINERS:
            leaves.append((pid, int(node["bytes"])))
    arr = np.asarray(leaves, np.int64).reshape(-1, 2)
    return arr[:, 0].copy(), arr[:, 1].copy(), "byProgram"
