"""Whether a compiled program fits in tile memory: :func:`check_fits` raises
:class:`OutOfMemoryError` naming the worst tiles, what fills them and the largest variables on
them.
"""

from __future__ import annotations

import numpy as np

from tremula.engine.memory import CATEGORIES, REGIONS, MemoryReport
from tremula.errors import OutOfMemoryError
from tremula.profile.schema import OVERLAP_KINDS


def _variables_on(report: MemoryReport, tile: int, top: int = 3) -> str:
    """The largest variables with elements on ``tile``, with their bytes there (read from
    the variable table's tile runs)."""
    table = report.variables
    here: list[tuple[int, int, str]] = []
    for name, runs in zip(table.get("names", []), table.get("tileRuns", [])):
        for first, count, nbytes in zip(runs[::3], runs[1::3], runs[2::3]):
            if first <= tile < first + count:
                here.append((-nbytes, len(here), name))
                break
    return ", ".join(f"{name!r} {-neg:,} B" for neg, _, name in sorted(here)[:top])


def check_fits(report: MemoryReport, target, top: int = 5) -> None:
    """Raise :class:`OutOfMemoryError` naming the worst tiles, the categories that fill
    them and the largest variables on them."""
    need = report.by_tile["totalIncludingGaps"]
    over = np.flatnonzero(need > target.memory_bytes_per_tile)
    if not over.size:
        return
    worst = over[np.argsort(-need[over], kind="stable")][:top]
    lines = []
    for t in worst.tolist():
        cats = sorted(
            (
                (
                    sum(
                        int(report.by_category[c][r][k][t]) for r in REGIONS for k in OVERLAP_KINDS
                    ),
                    c,
                )
                for c in CATEGORIES
            ),
            reverse=True,
        )
        top_cats = ", ".join(f"{c} {b:,} B" for b, c in cats[:3] if b)
        on_tile = _variables_on(report, t)
        lines.append(
            f"tile {t}: {int(need[t]):,} B needed (including gaps) of "
            f"{target.memory_bytes_per_tile:,} B; largest: {top_cats}"
            + (f"; variables: {on_tile}" if on_tile else "")
        )
    raise OutOfMemoryError(
        f"out of memory: {over.size} tile(s) exceed {target.memory_bytes_per_tile:,} bytes:\n  "
        + "\n  ".join(lines)
        + "\nSpread the tensors over more tiles, or set the engine option "
        "debug.allowOutOfMemory=true to get the profile anyway."
    )
