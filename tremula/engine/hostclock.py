"""The host CPU time of each program step's data effect, for ``tremula profile summary
--host-time`` (engine option ``autoReport.outputHostTime``; see
``tremula.profile.hosttime``). Off by default: then no step is wrapped and runs cost
nothing more. It reads no simulated state and writes none, so cycles, memory and profiles
are the same with it on."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tremula.profile.hosttime import host_time_document

#: the clock: CPU seconds of this process (not wall time, which other processes' load moves)
CLOCK = time.process_time


def step_key(node: Any) -> tuple[str, str]:
    """``(type, name)`` of a step: a compute set by its name, other steps by program name."""
    ccs = getattr(node, "ccs", None)
    return node.ptype, ccs.name if ccs is not None else node.name


class HostClock:
    """Calls and CPU seconds per step ``(type, name)``, in the order steps first ran."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], list[Any]] = {}  # key -> [calls, seconds]

    def _entry(self, node: Any) -> list[Any]:
        return self.entries.setdefault(step_key(node), [0, 0.0])

    def call(self, node: Any, effect: Callable[..., None], *args: Any) -> None:
        """``effect(*args)``, timed as a run of ``node``."""
        entry = self._entry(node)
        start = CLOCK()
        try:
            effect(*args)
        finally:
            entry[0] += 1
            entry[1] += CLOCK() - start

    def timed(self, node: Any, step: Callable[[], None]) -> Callable[[], None]:
        """``step`` (a replayed program's call without arguments), timed as ``node``."""
        entry = self._entry(node)

        def run() -> None:
            start = CLOCK()
            try:
                step()
            finally:
                entry[0] += 1
                entry[1] += CLOCK() - start

        return run

    def document(self) -> dict[str, Any]:
        """The ``host_time.json`` document of the steps run so far."""
        return host_time_document(
            [(t, name, calls, seconds) for (t, name), (calls, seconds) in self.entries.items()]
        )
