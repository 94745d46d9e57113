"""Copies on the tiles: the transpose of block buckets (GradA) and the per-PN slices of the
dense operands (propagation)."""

from __future__ import annotations

import numpy as np

from tremula import poplar
from tremula.libs.popsparse import estimators as est
from tremula.libs.popsparse.codelets.common import template_sizes, vertex_grid

# ---- the transpose of block buckets (GradA) ----


class BucketTranspose(poplar.Codelet):
    """Every block of a bucket's nz values transposed (block GradA reads ``B^T``)."""

    name = "popsparse::BucketTranspose"
    templates = ("T", "BLOCK")
    supervisor = True
    src = poplar.Input("T")
    dst = poplar.Output("T")

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        bx, by = template_sizes(v, "BLOCK")
        src = v["src"]
        dst = v["dst"]
        dst[...] = src.reshape(src.shape[0], -1, bx, by).swapaxes(-1, -2).reshape(dst.shape)

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        bx, by = template_sizes(v, "BLOCK")
        blocks = v.lengths("src") // (bx * by)
        return est.block_bucket_transpose_cycles(v.target, bx, v.dtype("src").size, blocks)


# ---- per-PN copies of the dense operands (propagation) ----


class DenseSlice(poplar.Codelet):
    """A PN's ``[Zt][N]`` slice of a dense operand copied into its tile's buffer: what the
    distribution and propagation compute sets read when the pattern propagates
    (PopLibs' per-tile copies of the dense input). It stands for a ``Copy`` program: the slice
    reaches the tile through the compute set's exchange, which is where the time goes; the
    vertex costs ``estimators.COPY_CYCLES`` (and lets the host copy through strided views
    rather than lists of element addresses). ``OPERAND`` names the operand (``s`` or
    ``qgrad``), ``REGION`` the PNs' tile shape ``XtxYt`` (a type per region), ``SHAPE`` is
    ``ZtxN``."""

    name = "popsparse::DenseSlice"
    templates = ("T", "OPERAND", "REGION", "SHAPE")
    supervisor = True
    src = poplar.Input("T")
    dst = poplar.Output("T")
    grid_x = poplar.State(poplar.UNSIGNED_INT)
    grid_y = poplar.State(poplar.UNSIGNED_INT)
    grid_z = poplar.State(poplar.UNSIGNED_INT)

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        grid = v.cached("grid", lambda: vertex_grid(v))
        shape = template_sizes(v, "SHAPE")
        dst = v.view("dst", (*grid, *shape))
        dst[...] = v.view("src", (*grid, *shape))

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        return np.full(v.n, est.COPY_CYCLES)
