"""``Graph.verify``: the graph's well-formedness checks (PyTorch FX's ``lint``)."""

from __future__ import annotations

import numpy as np

from tremula.errors import VerifyError
from tremula.poplar.addresses import AddressList
from tremula.poplar.graph import GraphState
from tremula.poplar.intervals import first_overlap, union_runs
from tremula.poplar.vertices import VertexGroup


def _unmapped_variables(state: GraphState) -> list[str]:
    problems = []
    for var in state.variables:
        if var.size == 0:
            continue
        tiles = state.space(var.dtype).tile_of[var.start : var.start + var.size]
        missing = np.flatnonzero(tiles < 0)
        if missing.size:
            kind = "constant" if var.is_constant else "variable"
            problems.append(
                f"{kind} {var.name!r} {list(var.shape)}: {missing.size} of "
                f"{var.size} elements not mapped to a tile (first: flat element "
                f"{int(missing[0])}); call graph.set_tile_mapping"
            )
    return problems


def _group_problems(state: GraphState, cs_name: str, g: VertexGroup) -> list[str]:
    problems = []
    name = g.vertex_type.name
    unmapped = np.flatnonzero(g.tiles < 0)
    if unmapped.size:
        problems.append(
            f"compute set {cs_name!r}: {unmapped.size} vertex(es) of type "
            f"{name!r} not mapped to a tile; call graph.set_tile_mapping(vertex, "
            f"tile)"
        )
    for fname, f in g.vertex_type.codelet.fields.items():
        if f.is_edge and fname not in g.edges:
            problems.append(
                f"compute set {cs_name!r}: vertex {name!r} field {fname!r} is not connected"
            )
        if not f.is_edge and fname not in g.state:
            problems.append(
                f"compute set {cs_name!r}: vertex {name!r} state {fname!r} has no value"
            )
    return problems


def _conflicts(state: GraphState, cs_name: str, groups: list[VertexGroup]) -> list[str]:
    """Elements written by two vertices, or written by one and read by another (checked
    on runs of consecutive addresses, not element by element)."""
    problems = []
    by_type: dict = {}
    for g in groups:
        for fname, conn in g.edges.items():
            f = g.vertex_type.codelet.fields[fname]
            entry = by_type.setdefault(conn.dtype, {"w": [], "r": []})
            if f.writes:
                starts, lengths = conn.addrs.runs()
                entry["w"].append((starts, starts + lengths))
            elif f.reads and conn.addrs.size:
                entry["r"].append(conn.addrs)
    for dtype, rw in by_type.items():
        if not rw["w"]:
            continue
        space = state.space(dtype)
        ws, we, overlap = union_runs(rw["w"])
        if overlap:
            i = int(np.flatnonzero(ws[1:] < np.maximum.accumulate(we)[:-1])[0]) + 1
            problems.append(
                f"compute set {cs_name!r} writes {_where(state, space, int(ws[i]))} "
                f"from more than one vertex"
            )
            continue
        reads = _near(rw["r"], int(ws[0]), int(we[-1]))
        if reads is None:
            continue
        hit = first_overlap(reads, (ws, we))
        if hit is not None:
            problems.append(
                f"compute set {cs_name!r} reads and writes one region: "
                f"{_where(state, space, hit)} is an input of one vertex and an "
                f"output of another"
            )
    return problems


def _near(reads: list[AddressList], lo: int, hi: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The read runs (of each field's addresses) that reach into ``[lo, hi)``, the span of
    the written runs, in their order, as ``(starts, ends)``; None if none does.
    (Operands mostly lie in other variables than the outputs: most fields are passed over
    on their bounds alone, found from their layouts.)"""
    kept = []
    for addrs in reads:
        first, end = addrs.bounds()
        if first >= hi or end <= lo:
            continue
        starts, lengths = addrs.runs()
        ends = starts + lengths
        near = (ends > lo) & (starts < hi)
        kept.append((starts, ends) if near.all() else (starts[near], ends[near]))
    if not kept:
        return None
    return np.concatenate([s for s, _ in kept]), np.concatenate([e for _, e in kept])


def _where(state: GraphState, space, addr: int) -> str:
    var = state.variables[int(space.variable_at(np.array([addr]))[0])]
    return f"element {addr - var.start} of {var.name!r}"


def verify_graph(state: GraphState) -> None:
    problems = _unmapped_variables(state)
    for cs, groups in zip(state.compute_sets, state.vertex_groups):
        for g in groups:
            problems += _group_problems(state, cs.name, g)
        problems += _conflicts(state, cs.name, groups)
    if problems:
        more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise VerifyError("graph verification failed:\n  " + "\n  ".join(problems[:10]) + more)
