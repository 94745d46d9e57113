"""The checks of Tremula's extensions of the graph profile (FORMAT.md, "Tremula
extensions"): ``memory.liveness.programSteps``, ``variables`` and ``computeSets.flops``.
All are optional; when present they must agree with the rest of the profile."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tremula.profile._checker import Checker
from tremula.profile._dims import Dims

#: The per-variable arrays of ``variables`` and their smallest allowed element (``liveFrom``
#: and ``liveTo`` are -1 for an always-live variable); ``tileRuns`` is checked apart.
VARIABLE_ARRAYS: dict[str, int] = {"bytes": 0, "alwaysLive": 0, "liveFrom": -1, "liveTo": -1}


def check_extensions(c: Checker, graph: Mapping[str, Any], path: str, dims: Dims) -> None:
    """Check the extensions a graph profile carries (none is required)."""
    memory = graph.get("memory")
    liveness = memory.get("liveness") if isinstance(memory, Mapping) else None
    liveness = liveness if isinstance(liveness, Mapping) else {}
    never = liveness.get("notAlwaysLive")
    max_bytes = never.get("maxBytes") if isinstance(never, Mapping) else None
    num_steps = None
    steps_path = f"{path}.memory.liveness.programSteps"
    if "programSteps" in liveness and c.kind(liveness["programSteps"], steps_path, "dict"):
        limit = max_bytes if isinstance(max_bytes, int) else None
        num_steps = check_program_steps(c, liveness["programSteps"], steps_path, dims, limit)
    if "variables" in graph and c.kind(graph["variables"], f"{path}.variables", "dict"):
        check_variables(c, graph["variables"], f"{path}.variables", dims, num_steps)
    compute_sets = graph.get("computeSets")
    if isinstance(compute_sets, Mapping) and "flops" in compute_sets:
        check_flops(c, compute_sets["flops"], f"{path}.computeSets.flops", dims)


def check_flops(c: Checker, flops: Any, path: str, dims: Dims) -> None:
    """Check ``computeSets.flops``: one entry per compute set, each an int >= 0 or null."""
    if c.kind(flops, path, "list") is None:
        return
    size = dims.sizes.get("computeSets")
    if size is not None:
        c.equal(f"len({path})", len(flops), size, "len(computeSets.names)")
    for i, value in enumerate(flops):
        if value is None or c.kind(value, f"{path}[{i}]", "int") is None:
            continue
        if value < 0:
            c.add(f"{path}[{i}]", f"{value} < 0 (FLOPs are counts; null where unknown)")


def check_program_steps(
    c: Checker, steps: Mapping[str, Any], path: str, dims: Dims, max_bytes: int | None
) -> int | None:
    """Check ``programSteps``; return its number of steps if usable."""
    programs = c.field(steps, "program", path, "list")
    amounts = c.field(steps, "notAlwaysLiveBytes", path, "list")
    if programs is None or amounts is None:
        return None
    prog = c.array(programs, f"{path}.program", [(None, "steps")])
    live = c.array(amounts, f"{path}.notAlwaysLiveBytes", [(len(programs), "len(program)")])
    if prog is not None:
        c.indices(prog, f"{path}.program", dims.sizes.get("programs"), "programs")
    if live is not None and max_bytes is not None:
        peak = int(live.max(initial=0))
        c.equal(f"{path}.notAlwaysLiveBytes", peak, max_bytes, "notAlwaysLive.maxBytes (max)")
    return len(programs) if prog is not None else None


def check_variables(
    c: Checker, table: Mapping[str, Any], path: str, dims: Dims, num_steps: int | None
) -> None:
    """Check ``variables``: one entry per variable in every array, live ranges inside the
    program steps, and tile runs that sum to each variable's bytes."""
    names = c.field(table, "names", path, "list")
    if names is None:
        return
    n = (len(names), "len(names)")
    arrays: dict[str, np.ndarray | None] = {}
    for key, minimum in VARIABLE_ARRAYS.items():
        value = c.field(table, key, path, "list")
        arrays[key] = None if value is None else c.array(value, f"{path}.{key}", [n], minimum)
    _check_live_ranges(c, arrays, path, num_steps)
    runs = c.field(table, "tileRuns", path, "list")
    if runs is not None and c.equal(f"{path}.tileRuns", len(runs), len(names), "len(names)"):
        _check_tile_runs(c, runs, f"{path}.tileRuns", dims, arrays["bytes"])


def _check_live_ranges(
    c: Checker, arrays: Mapping[str, np.ndarray | None], path: str, num_steps: int | None
) -> None:
    always, start, end = arrays["alwaysLive"], arrays["liveFrom"], arrays["liveTo"]
    if always is None or start is None or end is None:
        return
    ranged = always == 0
    if np.any((always != 0) & (always != 1)):
        c.add(f"{path}.alwaysLive", "expected 0 or 1 for every variable")
    bad = np.flatnonzero(ranged & ((start < 0) | (end < start)))
    if bad.size:
        v = int(bad[0])
        c.add(f"{path}.liveFrom[{v}]", f"live range [{start[v]}, {end[v]}] is empty or negative")
    if num_steps is not None:
        over = np.flatnonzero(ranged & (end >= num_steps))
        if over.size:
            v = int(over[0])
            c.add(f"{path}.liveTo[{v}]", f"{end[v]} >= the {num_steps} program steps")


def _check_tile_runs(
    c: Checker, runs: Sequence[Any], path: str, dims: Dims, sizes: np.ndarray | None
) -> None:
    """Each entry is a flat list of ``first tile, tile count, bytes per tile`` triples."""
    tiles = dims.num_tiles
    for v, run in enumerate(runs):
        arr = c.array(run, f"{path}[{v}]", [(None, "3 x runs")])
        if arr is None:
            continue
        if arr.size % 3:
            c.add(f"{path}[{v}]", f"{arr.size} numbers, not a multiple of 3")
            continue
        first, count, amount = arr[0::3], arr[1::3], arr[2::3]
        if tiles is not None and np.any(first + count > tiles):
            c.add(f"{path}[{v}]", f"a run goes past tile {tiles - 1}")
        if sizes is not None and int((count * amount).sum()) != int(sizes[v]):
            c.add(f"{path}[{v}]", f"runs hold {int((count * amount).sum())} bytes, not {sizes[v]}")
