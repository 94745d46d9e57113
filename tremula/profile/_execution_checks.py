"""The checks of an execution profile: mode arrays, program trace, simulation and steps.

Without a graph profile only what the execution profile says about itself is checked (types,
``cycles = cyclesTo - cyclesFrom``, balances, ``cyclesTo <= simulation.cycles``...). With
one, indices into its tables, per-tile lengths and ``activeTiles <= numTiles`` are checked
too, as is the agreement of each step with its program (see FORMAT.md's clarifications).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tremula.profile import schema
from tremula.profile._checker import Checker
from tremula.profile._dims import Dims

#: Mode arrays with one row per entry of a graph table: (table, per tile?).
_MODE_ARRAY_SHAPES: dict[str, tuple[str, bool]] = {
    "computeSetCyclesByTile": ("computeSets", True),
    "computeSetCycles": ("computeSets", False),
    "externalExchangeCycles": ("externalExchanges", True),
    "hostExchangeCycles": ("hostExchanges", True),
}


@dataclass(frozen=True)
class _StepContext:
    """What the step checks need from the graph profile and the simulation."""

    dims: Dims
    total_cycles: int | None


def check_execution(c: Checker, e: Any, dims: Dims, path: str = "executionProfile") -> None:
    """Record every problem of ``e`` (an execution profile) in ``c``.

    Args:
        c: The problem collector.
        e: The execution profile.
        dims: The sizes of its graph profile (all None when there is none).
        path: The path of ``e`` in messages.
    """
    if c.kind(e, path, "dict") is None:
        return
    mode = c.choice(e, "profilerMode", path, schema.PROFILER_MODES)
    if mode == "VERTICES":
        _check_vertex_mode(c, e, path, dims)
    elif mode in schema.MODE_FIELDS:
        _check_mode_array(c, e, path, dims, mode)
    optional = mode is None or mode in schema.MODES_WITHOUT_TRACE
    trace = c.field(e, "programTrace", path, "list", optional=optional)
    if trace is not None:
        ids = c.array(trace, f"{path}.programTrace", [(None, "")])
        if ids is not None:
            c.indices(ids, f"{path}.programTrace", dims.sizes.get("programs"), "programs")
    simulation = c.field(e, "simulation", path, "dict", optional=optional)
    if simulation is not None:
        _check_simulation(c, simulation, f"{path}.simulation", dims)


def _check_mode_array(c: Checker, e: Mapping[str, Any], path: str, dims: Dims, mode: str) -> None:
    """The one array of a per-compute-set or per-exchange mode, one row per table entry."""
    (key,) = schema.MODE_FIELDS[mode]
    table, per_tile = _MODE_ARRAY_SHAPES[key]
    value = c.field(e, key, path, "list")
    if value is not None:
        shape = [dims.of(table), dims.tiles()] if per_tile else [dims.of(table)]
        c.array(value, f"{path}.{key}", shape)


def _check_vertex_mode(c: Checker, e: Mapping[str, Any], path: str, dims: Dims) -> None:
    """VERTICES: three equal-length arrays; compute sets and vertex types index their tables."""
    cycles = c.field(e, "vertexCycles", path, "list")
    length = (None if cycles is None else len(cycles), "len(vertexCycles)")
    if cycles is not None:
        c.array(cycles, f"{path}.vertexCycles", [(None, "")])
    for key, table in (("vertexComputeSet", "computeSets"), ("vertexType", "vertexTypes")):
        value = c.field(e, key, path, "list")
        arr = None if value is None else c.array(value, f"{path}.{key}", [length])
        if arr is not None:
            c.indices(arr, f"{path}.{key}", dims.sizes.get(table), table)


def _check_simulation(c: Checker, sim: Mapping[str, Any], path: str, dims: Dims) -> None:
    total = c.count(sim, "cycles", path)
    tile_cycles = c.field(sim, "tileCycles", path, "dict")
    if tile_cycles is not None:
        _check_tile_cycles(c, tile_cycles, f"{path}.tileCycles", total, dims.num_tiles)
    steps = c.field(sim, "steps", path, "list")
    context = _StepContext(dims, total)
    for i, step in enumerate(steps or ()):
        _check_step(c, step, f"{path}.steps[{i}]", context)


def _check_tile_cycles(
    c: Checker, tc: Mapping[str, Any], path: str, total: int | None, num_tiles: int | None
) -> None:
    """Every key present and >= 0; the partition keys fit in ``cycles x numTiles``."""
    values = {key: c.count(tc, key, path) for key in schema.TILE_CYCLES_KEYS}
    parts = [v for key in schema.TILE_CYCLES_PARTITION if (v := values[key]) is not None]
    if total is None or num_tiles is None or len(parts) < len(schema.TILE_CYCLES_PARTITION):
        return
    used, available = sum(parts), total * num_tiles
    if used > available:
        text = " + ".join(schema.TILE_CYCLES_PARTITION)
        c.add(path, f"{text} = {used} > simulation.cycles x numTiles = {available}")


def _check_step(c: Checker, step: Any, path: str, ctx: _StepContext) -> None:
    if c.kind(step, path, "dict") is None:
        return
    stype = c.field(step, "type", path, "str")
    if stype is not None and stype not in schema.STEP_FIELDS:
        c.add(f"{path}.type", f"unknown step type {stype!r}")
        stype = None
    c.field(step, "name", path, "str", optional=True)
    program = c.field(step, "program", path, "int")
    if program is not None:
        program = c.index(program, f"{path}.program", ctx.dims.sizes.get("programs"), "programs")
    _check_step_cycles(c, step, path, ctx)
    for key in schema.STEP_BALANCE_FIELDS:
        c.fraction(step, key, path)
    if stype is not None:
        for key in schema.STEP_FIELDS[stype]:
            _STEP_FIELD_CHECKS[key](c, step, path, ctx, key)
    if program is not None and program < len(ctx.dims.programs):
        _check_step_program(c, step, path, stype, program, ctx.dims.programs[program])


def _check_step_cycles(c: Checker, step: Mapping[str, Any], path: str, ctx: _StepContext) -> None:
    cycles = c.count(step, "cycles", path)
    start = c.count(step, "cyclesFrom", path)
    end = c.count(step, "cyclesTo", path)
    if cycles is not None and start is not None and end is not None:
        c.equal(f"{path}.cycles", cycles, end - start, "cyclesTo - cyclesFrom")
    if end is not None and ctx.total_cycles is not None and end > ctx.total_cycles:
        c.add(f"{path}.cyclesTo", f"{end} > simulation.cycles = {ctx.total_cycles}")
    active = c.count(step, "activeTiles", path)
    num_tiles = ctx.dims.num_tiles
    if active is not None and num_tiles is not None and active > num_tiles:
        c.add(f"{path}.activeTiles", f"{active} > numTiles = {num_tiles}")


def _check_step_program(
    c: Checker, step: Mapping[str, Any], path: str, stype: str | None, index: int, program: Any
) -> None:
    """The step carries its program's name, and agrees with a program of its own type."""
    if not isinstance(program, Mapping):
        return
    where = f"programs[{index}]"
    step_name, program_name = step.get("name"), program.get("name")
    if step_name is None and program_name is not None:
        c.add(f"{path}.name", f"missing, but {where}.name = {program_name!r}")
    elif step_name is not None and program_name is None:
        c.add(f"{path}.name", f"{step_name!r} given, but {where} has no name")
    elif step_name != program_name:
        c.add(f"{path}.name", f"{step_name!r} != {where}.name = {program_name!r}")
    if stype not in schema.STEP_PROGRAM_LINKS or program.get("type") != stype:
        return
    step_key, program_key = schema.STEP_PROGRAM_LINKS[stype]
    if step_key in step and program_key in program and step[step_key] != program[program_key]:
        got, expected = step[step_key], program[program_key]
        c.add(f"{path}.{step_key}", f"{got!r} != {where}.{program_key} = {expected!r}")


def _check_step_index(c: Checker, step: Mapping, path: str, ctx: _StepContext, key: str) -> None:
    table = schema.STEP_INDEX_FIELDS[key]
    value = c.field(step, key, path, "int")
    if value is not None:
        c.index(value, f"{path}.{key}", ctx.dims.sizes.get(table), table)


def _check_step_fraction(c: Checker, step: Mapping, path: str, ctx: _StepContext, key: str) -> None:
    c.fraction(step, key, path)


def _check_step_count(c: Checker, step: Mapping, path: str, ctx: _StepContext, key: str) -> None:
    c.count(step, key, path)


def _check_step_sync(c: Checker, step: Mapping, path: str, ctx: _StepContext, key: str) -> None:
    c.choice(step, key, path, schema.SYNC_TYPES)


_STEP_FIELD_CHECKS: dict[str, Callable[[Checker, Mapping, str, _StepContext, str], None]] = {
    **dict.fromkeys(schema.STEP_INDEX_FIELDS, _check_step_index),
    "threadBalance": _check_step_fraction,
    "dataBalance": _check_step_fraction,
    "totalData": _check_step_count,
    "cyclesOverlapped": _check_step_count,
    "syncType": _check_step_sync,
}
