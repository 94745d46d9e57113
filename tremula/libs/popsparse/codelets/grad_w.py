"""GradW: the products of Qgrad and S sampled at the non-zeros, into the partial buckets."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from tremula import poplar
from tremula.libs.popsparse import estimators as est
from tremula.libs.popsparse import kernels
from tremula.libs.popsparse.codelets.common import (
    geometry,
    select_blocks,
    template_sizes,
    zeroing_cycles,
)
from tremula.libs.popsparse.fields import ContentCache, Rows, repeats, unique


class GradWVertex(poplar.Codelet):
    """GradW: the bucket's partials at its blocks += Qgrad S^T over the tile's batch."""

    supervisor = True
    meta_info = poplar.Input(poplar.UNSIGNED_SHORT)
    acc = poplar.Output("P")
    qgrad = poplar.Input("T")
    s = poplar.Input("T")
    sub_group_id = poplar.State(poplar.UNSIGNED_SHORT)
    words = poplar.State(poplar.UNSIGNED_INT)
    nz_per_bucket = poplar.State(poplar.UNSIGNED_INT)
    num_z = poplar.State(poplar.UNSIGNED_INT)
    z_grain = poplar.State(poplar.UNSIGNED_INT, default=1)
    est_rows = poplar.State(poplar.UNSIGNED_INT)
    est_blocks = poplar.State(poplar.UNSIGNED_INT)
    grid_x = poplar.State(poplar.UNSIGNED_INT)
    grid_y = poplar.State(poplar.UNSIGNED_INT)
    grid_z = poplar.State(poplar.UNSIGNED_INT)
    accumulate: ClassVar[bool] = False
    block: ClassVar[bool] = False
    method: ClassVar[str] = "GradW"

    @classmethod
    def compute(cls, v: poplar.Batch) -> None:
        geo = v.cached("geometry", lambda: geometry(v, cls))
        grid, (r_rows, c_cols, z) = geo["grid"], geo["shape"]
        fmt = geo["fmt"]
        mi = v.view("meta_info", (*grid, 1, fmt.words))
        acc = v.view("acc", (*grid, fmt.nz))
        qg = v.view("qgrad", (*grid, z, r_rows))
        s = v.view("s", (*grid, z, c_cols))
        keeps = v.cached("repeats", lambda: {"qgrad": repeats(qg), "s": repeats(s)})
        mi_u, mi_idx = unique(mi)
        cache = v.cached("structures", ContentCache)
        for r in range(acc.shape[0]):
            content = mi_u[r]
            a, b, index = cache.get(
                content,
                lambda c=content: _grad_w_structure(geo, v.sub_group_id, c, mi_idx, keeps),
            )
            prods = kernels.sampled_products(
                a[0].gather(qg[r]), b[0].gather(s[r]), a[1], b[1], fmt.block
            )
            if not cls.accumulate:
                acc[r] = 0
            acc[r][index] += prods

    @classmethod
    def cycles(cls, v: poplar.VertexInfo) -> np.ndarray:
        """PopLibs' estimate, plus zeroing the partial bucket in the first compute."""
        return cls.product_cycles(v) + zeroing_cycles(v, "acc", cls.accumulate)

    @classmethod
    def product_cycles(cls, v: poplar.VertexInfo) -> np.ndarray:
        ts = v.dtype("s").size
        _, _, z = template_sizes(v, "SHAPE")
        t = v.target
        rows = v.state("est_rows").astype(np.int64)
        blocks = v.state("est_blocks").astype(np.int64)
        if cls.method == "GradWBlock":
            return est.block_gradw_cycles(t, template_sizes(v, "BLOCK")[0], ts, z, blocks)
        if cls.method == "GradWAMPBlock":
            zg = int(v.state("z_grain")[0]) if v.n else 1
            return est.block_gradw_amp_cycles(t, template_sizes(v, "BLOCK")[0], ts, z, blocks, zg)
        return est.ew_gradw_cycles(t, ts, z, rows, blocks)

    @classmethod
    def flops(cls, v: poplar.VertexInfo) -> np.ndarray:
        _, _, z = template_sizes(v, "SHAPE")
        area = template_sizes(v, "BLOCK")[0] ** 2 if cls.block else 1
        return 2.0 * v.state("est_blocks") * area * z


def _grad_w_structure(
    geo: dict[str, Any],
    sid: np.ndarray,
    content: np.ndarray,
    mi_idx: np.ndarray,
    keeps: dict[str, tuple[bool, ...]],
) -> tuple[tuple[Rows, np.ndarray], tuple[Rows, np.ndarray], tuple[np.ndarray, ...]]:
    """The rows of Qgrad and S each processed block reads, and the index of its partials
    in the ``[*grid, nz]`` partial buckets."""
    fmt, grid = geo["fmt"], geo["grid"]
    r_rows, c_cols, _ = geo["shape"]
    entries, _, ei, coords = select_blocks(geo, sid, content, mi_idx)
    x, y = entries.x[ei], entries.y[ei]
    bx, by = fmt.block
    if np.any(x + bx > r_rows) or np.any(y + by > c_cols):
        raise kernels.MetaInfoError(
            f"Invalid meta-info read on the device: a block lies outside the {r_rows} x "
            f"{c_cols} tile of a GradW vertex"
        )
    a, a_pos = Rows.of(coords, x, keeps["qgrad"], grid, r_rows, bx)
    b, b_pos = Rows.of(coords, y, keeps["s"], grid, c_cols, by)
    slot = entries.slot[ei][:, None] + np.arange(fmt.area)
    index = (*(c[:, None] for c in coords), slot)
    return (a, a_pos * bx), (b, b_pos * by), index
