"""What the product vertices share: template arguments, the vertices' grid, the sizes every
run uses and the blocks a vertex processes."""

from __future__ import annotations

from typing import Any

import numpy as np

from tremula import poplar
from tremula.libs.popsparse import estimators as est
from tremula.libs.popsparse import kernels

GRID = ("grid_x", "grid_y", "grid_z")


def shape_arg(*sizes: int) -> str:
    """The ``SHAPE`` (or ``BLOCK``) template argument of sizes."""
    return "x".join(str(int(s)) for s in sizes)


def template_sizes(v: poplar.VertexInfo | poplar.Batch, name: str) -> tuple[int, ...]:
    return tuple(int(s) for s in v.vertex_type.params[name].split("x"))


def zeroing_cycles(
    v: poplar.VertexInfo | poplar.Batch, partials: str, accumulate: bool
) -> np.ndarray | int:
    """Zeroing field ``partials`` in a first compute (the distribution's vertex writes
    them: PopSparse's "zeroInfo" operand, the 64-bit words of partials to zero, is non-zero
    only in the first compute); none for a vertex that accumulates into them."""
    if accumulate:
        return 0
    return est.zero_cycles(v.target, v.lengths(partials) * v.dtype(partials).size)


def vertex_grid(v: poplar.VertexInfo | poplar.Batch) -> tuple[int, int, int]:
    """The vertices' grid, or a single row of them when the states do not describe one."""
    if v.n == 0:
        return (1, 1, 0)
    rows = [v.state(name) for name in GRID]
    grid = tuple(int(r[0]) for r in rows)
    if all(np.all(r == r[0]) for r in rows) and int(np.prod(grid)) == v.n:
        return grid  # type: ignore[return-value]
    return (1, 1, v.n)


def geometry(v: poplar.Batch, cls: type) -> dict[str, Any]:
    """The sizes every run of a vertex group uses (from its type and state)."""
    shape = template_sizes(v, "SHAPE")
    edge = template_sizes(v, "BLOCK")[0] if getattr(cls, "block", False) else 1
    words = int(v.state("words")[0]) if v.n else 1
    lengths = v.lengths("meta_info")
    fmt = kernels.BucketFormat(
        (edge, edge),
        words,
        int(v.state("nz_per_bucket")[0]) if v.n else 1,
        v.dtype("s").size,
        int(v.state("num_z")[0]) if v.n else 1,
        getattr(cls, "grad_a_info", False),
    )
    return {
        "grid": vertex_grid(v),
        "shape": shape,
        "fmt": fmt,
        "buckets": int(lengths[0]) // max(words, 1) if v.n else 1,
    }


def select_blocks(
    geo: dict[str, Any], sid: np.ndarray, content: np.ndarray, mi_idx: np.ndarray
) -> tuple[kernels.Entries, np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
    """Decoded blocks, the (vertex, block) pairs the vertices process, and the grid
    coordinates of each pair's vertex."""
    rows = int(np.prod(content.shape[:3]))  # the distinct fields (content: [*grid', b, w])
    entries = kernels.decode(content.reshape(rows, -1), geo["fmt"])
    vert, ei = kernels.select(entries, mi_idx, sid)
    return entries, vert, ei, np.unravel_index(vert, geo["grid"])
