"""The checks of ``graphProfile.memory``: per-tile shapes and the memory invariants.

Invariants (FORMAT.md): ``byTile.total = interleaved + nonInterleaved + overflowed``; each
region's ``*IncludingGaps >= *``; ``totalIncludingGaps >= total``; every category's ``total``
is the sum of its six region arrays and the categories sum to ``byTile.total``;
``totalBytes`` sums the other byComputeSet / byVertexType parts; the liveness totals are the
sums of their per-tile arrays, ``maxBytesByTile >= bytesByTile``, and no ``byProgram`` node
exceeds ``maxBytes``. Paths ending in ``.*`` name a sum over the entries of a table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tremula.profile import schema
from tremula.profile._checker import Checker
from tremula.profile._dims import Dims


def check_memory(c: Checker, m: Mapping[str, Any], path: str, dims: Dims) -> None:
    """Record the problems of the ``memory`` section ``m`` at ``path``."""
    by_tile = c.field(m, "byTile", path, "dict")
    total = None if by_tile is None else _check_by_tile(c, by_tile, f"{path}.byTile", dims)
    categories = c.field(m, "byCategory", path, "dict")
    if categories is not None:
        _check_by_category(c, categories, f"{path}.byCategory", dims, total)
    for key, table in (("byComputeSet", "computeSets"), ("byVertexType", "vertexTypes")):
        section = c.field(m, key, path, "dict")
        if section is not None:
            _check_vertex_memory(c, section, f"{path}.{key}", [dims.of(table), dims.tiles()])
    liveness = c.field(m, "liveness", path, "dict")
    if liveness is not None:
        _check_liveness(c, liveness, f"{path}.liveness", dims)


def _tile_arrays(
    c: Checker, obj: Mapping[str, Any], keys: Sequence[str], path: str, dims: Dims
) -> dict[str, np.ndarray | None]:
    """Check the per-tile arrays ``obj[key]`` for each key; None for those that are bad."""
    arrays: dict[str, np.ndarray | None] = {}
    for key in keys:
        value = c.field(obj, key, path, "list")
        arrays[key] = None if value is None else c.array(value, f"{path}.{key}", [dims.tiles()])
    return arrays


def _total(arrays: Sequence[np.ndarray | None]) -> np.ndarray | None:
    """The elementwise sum of ``arrays``; None when there are none or one is unusable."""
    present = [a for a in arrays if a is not None]
    if not present or len(present) < len(arrays):
        return None
    total = present[0]
    for a in present[1:]:
        total = total + a
    return total


def _check_by_tile(
    c: Checker, by_tile: Mapping[str, Any], path: str, dims: Dims
) -> np.ndarray | None:
    """Check ``byTile``; return its ``total`` array if usable."""
    a = _tile_arrays(c, by_tile, schema.BY_TILE_KEYS, path, dims)
    regions = _total([a[r] for r in schema.MEMORY_REGIONS])
    if a["total"] is not None and regions is not None:
        text = " + ".join(schema.MEMORY_REGIONS)
        c.elementwise(f"{path}.total", a["total"], "==", regions, text)
    for key in (*schema.MEMORY_REGIONS, "total"):
        gaps, without = a[f"{key}IncludingGaps"], a[key]
        if gaps is not None and without is not None:
            c.elementwise(f"{path}.{key}IncludingGaps", gaps, ">=", without, key)
    return a["total"]


def _check_by_category(
    c: Checker,
    categories: Mapping[str, Any],
    path: str,
    dims: Dims,
    by_tile_total: np.ndarray | None,
) -> None:
    totals: list[np.ndarray | None] = []
    for name in categories:
        if name not in schema.MEMORY_CATEGORIES:
            c.add(f"{path}.{name}", "unknown memory category")
    for name in schema.MEMORY_CATEGORIES:
        category = c.field(categories, name, path, "dict")
        total = None if category is None else _check_category(c, category, f"{path}.{name}", dims)
        totals.append(total)
    total = _total(totals)
    if by_tile_total is not None and total is not None:
        c.elementwise(f"{path}.*.total", total, "==", by_tile_total, "byTile.total")


def _check_category(
    c: Checker, category: Mapping[str, Any], path: str, dims: Dims
) -> np.ndarray | None:
    """Check one category; return its ``total`` if it and its six parts are usable."""
    parts: list[np.ndarray | None] = []
    for region in schema.MEMORY_REGIONS:
        split = c.field(category, region, path, "dict")
        if split is None:
            parts.append(None)
            continue
        arrays = _tile_arrays(c, split, schema.OVERLAP_KINDS, f"{path}.{region}", dims)
        parts.extend(arrays.values())
    total = _tile_arrays(c, category, ("total",), path, dims)["total"]
    summed = _total(parts)
    if total is None or summed is None:
        return None
    c.elementwise(f"{path}.total", total, "==", summed, "sum of the six region arrays")
    return total


def _check_vertex_memory(
    c: Checker, section: Mapping[str, Any], path: str, shape: Sequence[tuple]
) -> None:
    """Check ``byComputeSet`` or ``byVertexType``: shapes, and ``totalBytes`` = sum of parts."""
    arrays: dict[str, np.ndarray | None] = {}
    for key in schema.VERTEX_MEMORY_KEYS:
        value = c.field(section, key, path, "list")
        arrays[key] = None if value is None else c.array(value, f"{path}.{key}", shape)
    parts = _total([arrays[key] for key in schema.VERTEX_MEMORY_PARTS])
    total = arrays["totalBytes"]
    if total is not None and parts is not None:
        c.elementwise(f"{path}.totalBytes", total, "==", parts, "sum of the other parts")


def _check_liveness(c: Checker, liveness: Mapping[str, Any], path: str, dims: Dims) -> None:
    always = c.field(liveness, "alwaysLive", path, "dict")
    if always is not None:
        apath = f"{path}.alwaysLive"
        by_tile = _tile_arrays(c, always, ("bytesByTile",), apath, dims)["bytesByTile"]
        total = c.count(always, "bytes", apath)
        if by_tile is not None and total is not None:
            c.equal(f"{apath}.bytes", total, int(by_tile.sum()), "sum of bytesByTile")
    never = c.field(liveness, "notAlwaysLive", path, "dict")
    if never is not None:
        _check_not_always_live(c, never, f"{path}.notAlwaysLive", dims)


def _check_not_always_live(c: Checker, nal: Mapping[str, Any], path: str, dims: Dims) -> None:
    a = _tile_arrays(c, nal, ("bytesByTile", "maxBytesByTile"), path, dims)
    at_peak, peak_by_tile = a["bytesByTile"], a["maxBytesByTile"]
    if at_peak is not None and peak_by_tile is not None:
        c.elementwise(f"{path}.maxBytesByTile", peak_by_tile, ">=", at_peak, "bytesByTile")
    max_bytes = c.count(nal, "maxBytes", path)
    if max_bytes is not None and at_peak is not None:
        c.equal(f"{path}.maxBytes", max_bytes, int(at_peak.sum()), "sum of bytesByTile")
    tree = c.field(nal, "byProgram", path, "list")
    if tree is not None:
        _check_program_tree(c, tree, f"{path}.byProgram", dims, max_bytes)


def _check_program_tree(
    c: Checker, roots: Sequence[Any], path: str, dims: Dims, max_bytes: int | None
) -> None:
    """Walk the ``byProgram`` tree iteratively (it mirrors the program tree and may be deep)."""
    pending = [(node, f"{path}[{i}]") for i, node in reversed(list(enumerate(roots)))]
    num_programs = dims.sizes.get("programs")
    while pending:
        node, node_path = pending.pop()
        if c.kind(node, node_path, "dict") is None:
            continue
        program = c.field(node, "program", node_path, "int")
        if program is not None:
            c.index(program, f"{node_path}.program", num_programs, "programs")
        size = c.count(node, "bytes", node_path)
        if size is not None and max_bytes is not None and size > max_bytes:
            c.add(f"{node_path}.bytes", f"{size} > notAlwaysLive.maxBytes = {max_bytes}")
        children = c.field(node, "children", node_path, "list") or ()
        for i in reversed(range(len(children))):
            pending.append((children[i], f"{node_path}.children[{i}]"))
