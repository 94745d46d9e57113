"""The distribution and propagation of a sparse pass's products (PopLibs'
``FullyConnected.cpp``), the same for Fwd, GradA and GradW: a :class:`Pass` says what the
pass's vertices connect (the buckets that travel, the dense operands, the fixed fields) and
:func:`distribute_and_propagate` builds the rest."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from tremula import poplar
from tremula.libs.popsparse import codelets as cl
from tremula.libs.popsparse import propagation
from tremula.libs.popsparse.device import (
    Layer,
    Region,
    dense_slices,
    group_buckets,
    map_pn_tensor,
    own_buckets,
    pn_full_z,
    pn_slices,
    product_states,
    regions,
    segments,
)


@dataclass(frozen=True)
class Bucket:
    """A ``[buckets, n]`` tensor a pass's vertices read bucket by bucket, and that travels
    in the propagation under ``name`` (copied back at the end: GradW's partials)."""

    field: str
    rows: poplar.Tensor
    name: str
    copy_back: bool = False


@dataclass(frozen=True)
class Operand:
    """A dense ``[Z][N]`` operand of a pass: the field reading it, ``N`` split along
    ``n_dim``, and its per-PN copy (``buffer``, ``[P][Z][N]`` with slabs along ``a_dim``)
    when the pattern propagates."""

    field: str
    dense: poplar.Tensor
    n_dim: str
    a_dim: str
    buffer: str


@dataclass(frozen=True)
class Pass:
    """What the vertices of one sparse pass connect: everything else of its distribution
    and propagation is the same for Fwd, GradA and GradW (:func:`distribute_and_propagate`).
    ``dims``: the output's and the input's dims of a vertex's shape; ``fixed``: fields
    that neither travel nor are dense operands (Fwd / GradA: the partials). ``whole_batch``
    (GradW): a distribution vertex covers the whole batch with its own bucket, not its Z
    slice with the Pz buckets of its group."""

    kind: str
    method: str
    dims: tuple[str, str]
    buckets: tuple[Bucket, ...]
    operands: tuple[Operand, ...]
    fixed: Callable[[Region], dict[str, poplar.Tensor]] = lambda r: {}
    whole_batch: bool = False
    z_grain: int | None = None


def distribute_and_propagate(
    layer: Layer, prog: poplar.Sequence, meta_info: poplar.Tensor, p: Pass
) -> None:
    """A pass's distribution (the products of the buckets each PN holds at the start) and,
    when the pattern can propagate, its propagation phase (``propagation.build``)."""
    g, plan = layer.graph, layer.plan
    x, y, z = layer.params.shape
    px, py, pz = plan.partition.xyz
    prefix = layer.prefix
    tiles = plan.bucket_tiles(p.kind)
    words = p.buckets[0].rows.shape[1]
    grad_a = p.kind == "grad_a"
    spread = own_buckets if p.whole_batch else group_buckets

    def connect(
        cs: poplar.ComputeSet,
        accumulate: bool,
        buckets: Callable[[int, Region], poplar.Tensor],
        dense: Callable[[int, Region], poplar.Tensor],
        per_pn: int,
        zc: int,
    ) -> None:
        def fields(r: Region) -> dict[str, poplar.Tensor]:
            out = {b.field: buckets(i, r) for i, b in enumerate(p.buckets)}
            out.update((o.field, dense(i, r)) for i, o in enumerate(p.operands))
            return {**out, **p.fixed(r)}

        states = partial(product_states, words=words, buckets=per_pn, grad_a=grad_a)
        add_regions(
            layer,
            cs,
            p.method,
            accumulate,
            tiles,
            _shape(*p.dims, zc),
            fields,
            lambda r: states(plan, r, z_grain=p.z_grain),
        )

    span = z if p.whole_batch else plan.z_tile

    def distribution(name: str, dense: Callable[[int, Region], poplar.Tensor]) -> poplar.Program:
        cs = g.add_compute_set(f"{prefix}/{name}")
        connect(cs, False, lambda i, r: spread(p.buckets[i].rows, plan, r), dense, pz, span)
        return poplar.Execute(cs, name=f"{prefix}/{name}")

    direct = distribution(
        "distribution",
        lambda i, r: dense_slices(
            p.operands[i].dense, r, p.operands[i].n_dim, full_z=p.whole_batch
        ),
    )
    if not propagation.needed(layer):
        prog.add(direct)
        return
    sizes, parts = {"x": x, "y": y}, {"x": px, "y": py}
    bufs = [
        g.add_variable(layer.dtype, (parts[o.a_dim], z, sizes[o.n_dim]), f"{prefix}/{o.buffer}")
        for o in p.operands
    ]
    for o, buf in zip(p.operands, bufs):
        map_pn_tensor(g, buf, plan, o.a_dim, o.n_dim, tiles)
    prepare = copy_slices(
        layer, tiles, [(o.field, o.dense, b, o.n_dim, o.a_dim) for o, b in zip(p.operands, bufs)]
    )
    read = pn_full_z if p.whole_batch else pn_slices
    local = distribution(
        "distributionLocal",
        lambda i, r: read(bufs[i], r, p.operands[i].a_dim, p.operands[i].n_dim),
    )

    def add(cs: poplar.ComputeSet, moved: list[poplar.Tensor]) -> None:
        connect(
            cs,
            True,
            lambda i, r: own_buckets(moved[i], plan, r),
            lambda i, r: pn_slices(bufs[i], r, p.operands[i].a_dim, p.operands[i].n_dim),
            1,
            plan.z_tile,
        )

    moving = [propagation.Moving(b.rows, b.name, b.copy_back) for b in p.buckets]
    phase = propagation.Phase(moving, tiles, add, prepare, local, direct)
    propagation.build(layer, prog, meta_info, phase)


def _shape(out_dim: str, in_dim: str, zc: int) -> Callable[[Region], tuple[int, int, int]]:
    return lambda r: (r.size(out_dim), r.size(in_dim), zc)


def add_regions(
    layer: Layer,
    cs: poplar.ComputeSet,
    method: str,
    accumulate: bool,
    tiles: np.ndarray,
    shape: Callable[[Region], tuple[int, int, int]],
    fields: Callable[[Region], dict[str, poplar.Tensor]],
    states: Callable[[Region], dict[str, Any]],
) -> None:
    """One ``add_vertices`` call per region, its own vertex type."""
    plan = layer.plan
    for r in regions(plan):
        vtype = cl.vertex_name(
            method,
            accumulate,
            layer.dtype.name,
            layer.partials.name,
            block=plan.block_dimensions,
            shape=shape(r),
        )
        conn: dict[str, Any] = {k: segments(t, r.n) for k, t in fields(r).items()}
        conn.update(states(r))
        layer.graph.add_vertices(cs, vtype, conn, tiles[r.pns(plan)])


def copy_slices(
    layer: Layer,
    tiles: np.ndarray,
    operands: list[tuple[str, poplar.Tensor, poplar.Tensor, str, str]],
) -> poplar.Program:
    """One compute set copying every PN's slices of dense operands into per-PN buffers on
    the PNs' tiles. Each operand is ``(name, [Z][N] tensor, [P][Z][N] buffer, the dim
    splitting N, the dim of the buffer's slabs)``."""
    g, plan = layer.graph, layer.plan
    name = f"{layer.prefix}/propagation/denseSlices"
    cs = g.add_compute_set(name)
    for what, dense, buf, n_dim, a_dim in operands:
        for r in regions(plan):
            shape = cl.shape_arg(plan.z_tile, r.size(n_dim))
            gx, gy, gz = r.grid
            fields = {
                "src": segments(dense_slices(dense, r, n_dim), r.n),
                "dst": segments(pn_slices(buf, r, a_dim, n_dim), r.n),
                "grid_x": gx,
                "grid_y": gy,
                "grid_z": gz,
            }
            region = cl.shape_arg(r.xt, r.yt)  # a vertex type per region
            vtype = f"popsparse::DenseSlice<{layer.dtype.name},{what},{region},{shape}>"
            g.add_vertices(cs, vtype, fields, tiles[r.pns(plan)])
    return poplar.Execute(cs, name=name)
