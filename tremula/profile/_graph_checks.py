"""The checks of a graph profile: field presence and types, shapes, indices and invariants.

``check_graph`` walks the sections of FORMAT.md's graph profile in order. The table sizes it
checks indices and outer dimensions against come from :func:`dims_of`, which reads them
leniently, so that one broken section does not hide the problems of the others.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from tremula.profile import schema
from tremula.profile._checker import Checker
from tremula.profile._dims import Dims, dims_of
from tremula.profile._extension_checks import check_extensions
from tremula.profile._memory_checks import check_memory

SectionCheck = Callable[[Checker, Any, str, Dims], None]


def check_graph(c: Checker, graph: Any, path: str = "graphProfile") -> None:
    """Record every problem of ``graph`` (a graph profile) in ``c``."""
    if c.kind(graph, path, "dict") is None:
        return
    dims = dims_of(graph)
    for key, kind, check in _SECTIONS:
        value = c.field(graph, key, path, kind)
        if value is not None:
            check(c, value, f"{path}.{key}", dims)
    check_extensions(c, graph, path, dims)


# -- target, optimisation info, counts, vertex types ----------------------------------------


#: target fields that are the product of two others
_TARGET_PRODUCTS = (
    ("numTiles", ("numIPUs", "tilesPerIPU")),
    ("totalMemory", ("bytesPerTile", "numTiles")),
    ("bytesPerIPU", ("bytesPerTile", "tilesPerIPU")),
)


def _check_target(c: Checker, t: Mapping[str, Any], path: str, dims: Dims) -> None:
    c.choice(t, "type", path, schema.TARGET_TYPES)
    c.choice(t, "ipuVersion", path, schema.IPU_VERSIONS)
    positive = {"numIPUs", "tilesPerIPU", "numTiles", "replicationFactor"}
    n = {k: c.count(t, k, path, 1 if k in positive else 0) for k in schema.TARGET_INT_FIELDS}
    clock = c.field(t, "clockFrequency", path, "number")
    if clock is not None and clock <= 0:
        c.add(f"{path}.clockFrequency", f"{clock} <= 0")
    delays = c.field(t, "relativeSyncDelayByTile", path, "list")
    if delays is not None:
        c.array(delays, f"{path}.relativeSyncDelayByTile", [(n["tilesPerIPU"], "tilesPerIPU")])
    for key, (a, b) in _TARGET_PRODUCTS:
        value, x, y = n[key], n[a], n[b]
        if value is not None and x is not None and y is not None:
            c.equal(f"{path}.{key}", value, x * y, f"{a} x {b}")


def _check_optimization_info(c: Checker, info: Mapping[str, Any], path: str, dims: Dims) -> None:
    for key in info:
        if c.kind(key, f"{path} key", "str") is not None:
            c.field(info, key, path, "number")


def _check_counts(c: Checker, g: Mapping[str, Any], path: str, dims: Dims) -> None:
    counts = {key: c.count(g, key, path) for key in schema.GRAPH_COUNT_FIELDS}
    num_cs, what = dims.of("computeSets")
    if counts["numComputeSets"] is not None and num_cs is not None:
        c.equal(f"{path}.numComputeSets", counts["numComputeSets"], num_cs, what)


def _check_strings(c: Checker, owner: Mapping[str, Any], key: str, path: str) -> None:
    values = c.field(owner, key, path, "list")
    for i, value in enumerate(values or ()):
        c.kind(value, f"{path}.{key}[{i}]", "str")


def _check_vertex_types(c: Checker, vt: Mapping[str, Any], path: str, dims: Dims) -> None:
    _check_strings(c, vt, "names", path)
    sizes = c.field(vt, "sizes", path, "list")
    if sizes is not None:
        c.array(sizes, f"{path}.sizes", [dims.of("vertexTypes")])


# -- compute sets and exchanges -------------------------------------------------------------


def _check_compute_sets(c: Checker, cs: Mapping[str, Any], path: str, dims: Dims) -> None:
    _check_strings(c, cs, "names", path)
    counts = c.field(cs, "vertexCounts", path, "list")
    types = c.field(cs, "vertexTypes", path, "list")
    if counts is not None and types is not None:
        _check_vertex_lists(c, counts, types, path, dims)
    optional = dims.target_type != "IPU_MODEL"
    estimates = c.field(cs, "cycleEstimates", path, "dict", optional=optional)
    if estimates is not None:
        _check_cycle_estimates(c, estimates, f"{path}.cycleEstimates", dims)


def _check_vertex_lists(
    c: Checker, counts: Sequence[Any], types: Sequence[Any], path: str, dims: Dims
) -> None:
    """``vertexCounts[cs][i]`` vertices of type ``vertexTypes[cs][i]``: equal ragged shapes."""
    rows = dims.of("computeSets")
    for key, value in (("vertexCounts", counts), ("vertexTypes", types)):
        if rows[0] is not None and len(value) != rows[0]:
            c.add(f"{path}.{key}", f"{len(value)} entries != {rows[1]} = {rows[0]}")
            return
    num_types = dims.sizes.get("vertexTypes")
    for i, (count_row, type_row) in enumerate(zip(counts, types)):
        count_path, type_path = f"{path}.vertexCounts[{i}]", f"{path}.vertexTypes[{i}]"
        if c.array(count_row, count_path, [(None, "")]) is None:
            continue
        if c.kind(type_row, type_path, "list") is None:
            continue
        if not c.equal(type_path, len(type_row), len(count_row), f"len({count_path})"):
            continue
        for j, vertex_type in enumerate(type_row):
            c.index(vertex_type, f"{type_path}[{j}]", num_types, "vertexTypes")


def _check_cycle_estimates(c: Checker, est: Mapping[str, Any], path: str, dims: Dims) -> None:
    rows = dims.of("computeSets")
    shapes = {
        "activeCyclesByTile": [rows, dims.tiles()],
        "activeCyclesByVertexType": [rows, dims.of("vertexTypes")],
        "cyclesByTile": [rows, dims.tiles()],
    }
    arrays = {}
    for key in schema.CYCLE_ESTIMATE_KEYS:
        value = c.field(est, key, path, "list")
        arrays[key] = None if value is None else c.array(value, f"{path}.{key}", shapes[key])
    total, active = arrays["cyclesByTile"], arrays["activeCyclesByTile"]
    if total is not None and active is not None:
        c.elementwise(f"{path}.cyclesByTile", total, ">=", active, "activeCyclesByTile")
    by_type = arrays["activeCyclesByVertexType"]
    if active is not None and by_type is not None and len(by_type) == len(active):
        c.elementwise(
            f"{path}.activeCyclesByVertexType.*",
            by_type.sum(axis=1),
            "==",
            active.sum(axis=1),
            "sum of activeCyclesByTile",
        )


def _check_exchange_table(
    c: Checker, ex: Mapping[str, Any], path: str, dims: Dims, table: str
) -> None:
    for key in schema.EXCHANGE_TABLES[table]:
        value = c.field(ex, key, path, "list")
        if value is not None:
            c.array(value, f"{path}.{key}", [dims.of(table), dims.tiles()])


# -- programs -------------------------------------------------------------------------------


def _check_programs(c: Checker, programs: Sequence[Any], path: str, dims: Dims) -> None:
    for i, program in enumerate(programs):
        _check_program(c, program, f"{path}[{i}]", dims)


def _check_program(c: Checker, p: Any, path: str, dims: Dims) -> None:
    if c.kind(p, path, "dict") is None:
        return
    ptype = c.field(p, "type", path, "str")
    c.field(p, "name", path, "str", optional=True)
    if ptype is None:
        return
    if ptype not in schema.PROGRAM_FIELDS:
        c.add(f"{path}.type", f"unknown program type {ptype!r}")
        return
    for key in schema.PROGRAM_FIELDS[ptype]:
        _PROGRAM_FIELD_CHECKS[key](c, p, path, dims, ptype)


def _check_children(c: Checker, p: Mapping, path: str, dims: Dims, ptype: str) -> None:
    children = c.field(p, "children", path, "list")
    if children is None:
        return
    low, high = schema.PROGRAM_CHILD_COUNTS[ptype]
    if len(children) < low or (high is not None and len(children) > high):
        expected = str(low) if low == high else f">= {low}" if high is None else f"{low}..{high}"
        c.add(f"{path}.children", f"{len(children)} children, a {ptype} has {expected}")
    for i, child in enumerate(children):
        c.index(child, f"{path}.children[{i}]", dims.sizes.get("programs"), "programs")


def _check_case_values(c: Checker, p: Mapping, path: str, dims: Dims, ptype: str) -> None:
    values = c.field(p, "caseValues", path, "list")
    children = p.get("children")
    if values is None or c.array(values, f"{path}.caseValues", [(None, "")], minimum=None) is None:
        return
    if isinstance(children, list) and children:
        c.equal(f"{path}.caseValues", len(values), len(children) - 1, "len(children) - 1")


def _check_memory_by_instruction(c: Checker, p: Mapping, path: str, dims: Dims, ptype: str) -> None:
    table = c.field(p, "memoryByInstruction", path, "dict")
    if table is None:
        return
    path = f"{path}.memoryByInstruction"
    parts = [c.count(table, key, path) for key in schema.MEMORY_BY_INSTRUCTION_PARTS]
    total = c.count(table, "total", path)
    if total is not None and None not in parts:
        c.equal(f"{path}.total", total, sum(parts), "sum of the other fields")


def _check_count(c: Checker, p: Mapping, path: str, dims: Dims, ptype: str) -> None:
    c.count(p, "count", path)


def _check_sync_type(c: Checker, p: Mapping, path: str, dims: Dims, ptype: str) -> None:
    c.choice(p, "syncType", path, schema.SYNC_TYPES)


ProgramFieldCheck = Callable[[Checker, Mapping, str, Dims, str], None]


def _index_field(key: str, table: str | None) -> ProgramFieldCheck:
    """A check that ``program[key]`` indexes ``table`` (None: the type's exchange table)."""

    def check(c: Checker, p: Mapping, path: str, dims: Dims, ptype: str) -> None:
        name = table or schema.PROGRAM_EXCHANGE_TABLES[ptype]
        value = c.field(p, key, path, "int")
        if value is not None:
            c.index(value, f"{path}.{key}", dims.sizes.get(name), name)

    return check


_PROGRAM_FIELD_CHECKS: dict[str, ProgramFieldCheck] = {
    "children": _check_children,
    "computeSet": _index_field("computeSet", "computeSets"),
    "exchange": _index_field("exchange", None),
    "target": _index_field("target", "functionPrograms"),
    "memoryByInstruction": _check_memory_by_instruction,
    "count": _check_count,
    "caseValues": _check_case_values,
    "syncType": _check_sync_type,
}


def _check_program_refs(c: Checker, refs: Sequence[Any], path: str, dims: Dims) -> None:
    for i, ref in enumerate(refs):
        c.index(ref, f"{path}[{i}]", dims.sizes.get("programs"), "programs")


_SECTIONS: tuple[tuple[str, str, SectionCheck], ...] = (
    ("target", "dict", _check_target),
    ("optimizationInfo", "dict", _check_optimization_info),
    ("graph", "dict", _check_counts),
    ("vertexTypes", "dict", _check_vertex_types),
    ("computeSets", "dict", _check_compute_sets),
    *(
        (table, "dict", partial(_check_exchange_table, table=table))
        for table in schema.EXCHANGE_TABLES
    ),
    ("programs", "list", _check_programs),
    ("controlPrograms", "list", _check_program_refs),
    ("functionPrograms", "list", _check_program_refs),
    ("memory", "dict", check_memory),
)
