"""What the device program of the dynamic sparse layer is built from: the ``SparseTensor``
and the checks of its use, the regions of processing nodes (PNs) that vertices are added
by, the views of the buckets and dense operands those vertices read, and the tile mappings
of the tensors the layer creates.

Everything is in forward terms (``W[X][Y]``, ``S[Y][Z]``, ``Q[X][Z]``, PopSparse's
notation); the layer's dense tensors are batch-major as its API takes them: activations
``[Z][Y]``, outputs and output gradients ``[Z][X]``; partials are ``[P][Z][N]`` (one
``[Z][N]`` slab per partition of the reduced dim). A PN ``(x, y, z)`` is bucket ``b = (x Py
+ y) Pz + z`` and sits on the tile the pass's mapping gives (``Plan.bucket_tiles``).

**Regions.** The partitions of X and of Y are all equal but the last; the PNs whose X and
Y partitions have equal sizes form a region, a ``[gx, gy, Pz]`` grid (at most four per
layer). Each region is one ``add_vertices`` call of its own vertex type (the sizes are in
the type), and every field is a strided view of one tensor shaped ``[gx, gy, Pz, *field]``
(buckets broadcast over the Z partitions of a group, dense slices over the partitions that
share them), connected as :class:`poplar.Segments`: the engine keeps the addresses compact
and the codelets view the fields in place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tremula import poplar
from tremula.libs.popsparse import codelets as cl
from tremula.libs.popsparse.cost import occupancy
from tremula.libs.popsparse.errors import PopsparseError
from tremula.libs.popsparse.options import Options
from tremula.libs.popsparse.params import FullyConnectedParams, MatMulParams, exact_ceil
from tremula.libs.popsparse.plan import Plan, PlanningCache
from tremula.libs.popsparse.planner import _type_name, get_plan, resolve
from tremula.libs.util import ensure_codelets

Params = FullyConnectedParams | MatMulParams


@dataclass(frozen=True)
class OpMetaData:
    """What a :class:`SparseTensor` was created for (PopLibs' ``opMetaData``): the layer or
    matmul parameters, the data type and the parsed options. The functions that take the
    tensor refuse other ones."""

    params: Params
    input_type: str
    options: Options

    def key(self) -> tuple:
        fc, opts = resolve(self.params, self.options)
        return fc, self.input_type, opts


@dataclass(frozen=True, eq=False)
class SparseTensor:
    """The device operand of a dynamic sparse layer: ``meta_info`` (1-D uint16, the encoded
    pattern) and ``nz_values`` (1-D, the data type), laid out as the host partitioner's
    ``SparsityDataImpl`` (``OVERVIEW.md``), so that ``engine.write_tensor`` of its arrays
    into the two tensors loads a pattern. ``op_meta_data`` is set by the functions that
    create the tensor; one built from two tensors has none (and is checked by shape)."""

    meta_info: poplar.Tensor
    nz_values: poplar.Tensor
    op_meta_data: OpMetaData | None = None

    def get_meta_info_tensor(self) -> poplar.Tensor:
        return self.meta_info

    def get_nz_values_tensor(self) -> poplar.Tensor:
        return self.nz_values


# ---- the layer a call builds ----


@dataclass(frozen=True)
class Layer:
    """A checked call: the graph, the plan, the options and the debug name."""

    graph: poplar.Graph
    plan: Plan
    params: FullyConnectedParams
    options: Options
    name: str
    where: str

    @property
    def dtype(self) -> poplar.Type:
        return poplar.as_type(self.plan.input_type)

    @property
    def partials(self) -> poplar.Type:
        return poplar.as_type(self.plan.partials_type)

    @property
    def prefix(self) -> str:
        """The debug prefix of the layer's compute sets and tensors."""
        return self.name or self.where

    def fail(self, what: str) -> PopsparseError:
        return PopsparseError(f"{self.where}{f' {self.name!r}' if self.name else ''}: {what}")


def make_layer(
    graph: poplar.Graph,
    input_type: Any,
    params: Params,
    options: Mapping[str, Any] | Options | None,
    cache: PlanningCache | None,
    name: str,
    where: str,
) -> Layer:
    """Plan the call (raising on bad params, options or type) and register the codelets."""
    if not isinstance(graph, poplar.Graph):
        raise PopsparseError(f"{where}: graph must be a poplar.Graph, got {type(graph).__name__}")
    fc, opts = resolve(params, options)
    type_name = _type_name(input_type)
    plan = get_plan(graph.target, type_name, params, options, cache)
    ensure_codelets(graph, cl.CODELETS)
    return Layer(graph, plan, fc, opts, name, where)


def check_weights(layer: Layer, weights: Any) -> SparseTensor:
    """``weights`` is a SparseTensor of this graph with the plan's sizes and types, made
    for the same params, type and options when it records them."""
    if not isinstance(weights, SparseTensor):
        raise layer.fail(
            f"weights must be a dynamic.SparseTensor (meta_info, nz_values), got "
            f"{type(weights).__name__}"
        )
    meta = weights.op_meta_data
    if meta is not None:
        want = (layer.params, layer.plan.input_type, layer.options)
        if meta.key() != want:
            raise layer.fail(
                f"the sparse tensor was created for {meta.params} ({meta.input_type}) with "
                f"options {meta.options}, but is used with {layer.params} "
                f"({layer.plan.input_type}) and options {layer.options}; a SparseTensor must "
                f"be used with the params and options it was created with"
            )
    check_meta_info(layer, weights.meta_info)
    check_dense(layer, weights.nz_values, (layer.plan.nz_elems,), "nz_values")
    return weights


def check_meta_info(layer: Layer, t: Any) -> poplar.Tensor:
    _own(layer, t, "meta_info")
    if t.dtype is not poplar.UNSIGNED_SHORT or t.shape != (layer.plan.meta_info_elems,):
        raise layer.fail(
            f"meta_info must be an unsigned short tensor of shape "
            f"({layer.plan.meta_info_elems},) for this layer's plan ({layer.plan.num_buckets} "
            f"buckets), got {t.dtype} {list(t.shape)}; create it with "
            f"create_fully_connected_weights and the same params and options"
        )
    return t


def check_dense(layer: Layer, t: Any, shape: tuple[int, ...], what: str) -> poplar.Tensor:
    _own(layer, t, what)
    if t.dtype is not layer.dtype or t.shape != shape:
        raise layer.fail(
            f"{what} must be a {layer.dtype} tensor of shape {list(shape)}, got {t.dtype} "
            f"{list(t.shape)} ({layer.params})"
        )
    return t


def _own(layer: Layer, t: Any, what: str) -> None:
    if not isinstance(t, poplar.Tensor):
        raise layer.fail(f"{what} must be a poplar.Tensor, got {type(t).__name__}")
    if t.graph is not layer.graph.state:
        raise layer.fail(f"{what} {t!r} belongs to another graph")


# ---- regions of PNs ----


@dataclass(frozen=True)
class Region:
    """PNs ``x0 <= x < x1``, ``y0 <= y < y1``, all Z partitions: X partitions of ``xt``
    elements (starting at ``xc``), Y partitions of ``yt`` (starting at ``yc``)."""

    x0: int
    x1: int
    y0: int
    y1: int
    xt: int
    yt: int
    xc: int
    yc: int
    pz: int

    @property
    def grid(self) -> tuple[int, int, int]:
        return self.x1 - self.x0, self.y1 - self.y0, self.pz

    @property
    def n(self) -> int:
        return int(np.prod(self.grid))

    def range(self, dim: str) -> tuple[int, int]:
        return (self.x0, self.x1) if dim == "x" else (self.y0, self.y1)

    def cols(self, dim: str) -> tuple[int, int]:
        """First and end element of the region along ``dim``."""
        g, size, c = (
            (self.x1 - self.x0, self.xt, self.xc)
            if dim == "x"
            else (
                self.y1 - self.y0,
                self.yt,
                self.yc,
            )
        )
        return c, c + g * size

    def size(self, dim: str) -> int:
        return self.xt if dim == "x" else self.yt

    def pns(self, plan: Plan) -> np.ndarray:
        """Bucket index of each PN of the region, in grid order."""
        _, py, pz = plan.partition.xyz
        x, y, z = np.meshgrid(
            np.arange(self.x0, self.x1), np.arange(self.y0, self.y1), np.arange(pz), indexing="ij"
        )
        return ((x * py + y) * pz + z).reshape(-1)

    def sub_group_ids(self, plan: Plan) -> np.ndarray:
        return plan.sub_group_ids()[self.pns(plan)]


def _classes(sizes: np.ndarray, starts: np.ndarray) -> list[tuple[int, int, int, int]]:
    """Runs of equal partition sizes: ``(first, end, size, first element)``."""
    if sizes.size > 1 and sizes[-1] != sizes[0]:
        return [
            (0, sizes.size - 1, int(sizes[0]), 0),
            (sizes.size - 1, sizes.size, int(sizes[-1]), int(starts[-1])),
        ]
    return [(0, sizes.size, int(sizes[0]), 0)]


def partition_classes(plan: Plan, dim: str) -> list[tuple[int, int, int, int]]:
    """Runs of equal partitions of ``dim``: ``(first, end, size, first element)`` (all but
    the last partition are equal, so at most two)."""
    return _classes(plan.sizes(dim), plan.starts(dim))


def regions(plan: Plan) -> list[Region]:
    pz = plan.partition.z
    out = []
    for x0, x1, xt, xc in _classes(plan.sizes("x"), plan.starts("x")):
        for y0, y1, yt, yc in _classes(plan.sizes("y"), plan.starts("y")):
            out.append(Region(x0, x1, y0, y1, xt, yt, xc, yc, pz))
    return out


# ---- views of the fields, [gx, gy, Pz, *field] ----


def bucket_rows(flat: poplar.Tensor, plan: Plan, offset: int, per_bucket: int, length: int):
    """``[buckets, length]``: words ``[offset, offset + length)`` of every bucket of a flat
    tensor whose buckets (of ``per_bucket`` elements) start at ``offset`` 0 of ``flat``."""
    nb = plan.num_buckets
    return flat[: nb * per_bucket].reshape((nb, per_bucket))[:, offset : offset + length]


def group_buckets(rows: poplar.Tensor, plan: Plan, r: Region) -> poplar.Tensor:
    """``[gx, gy, Pz, Pz, len]``: every PN reads the Pz buckets of its (x, y) group."""
    px, py, pz = plan.partition.xyz
    t = rows.reshape((px, py, pz, rows.shape[1]))[r.x0 : r.x1, r.y0 : r.y1]
    return t.expand([2]).broadcast(pz, 2)


def own_buckets(rows: poplar.Tensor, plan: Plan, r: Region) -> poplar.Tensor:
    """``[gx, gy, Pz, 1, len]``: every PN reads its own bucket."""
    px, py, pz = plan.partition.xyz
    t = rows.reshape((px, py, pz, rows.shape[1]))[r.x0 : r.x1, r.y0 : r.y1]
    return t.expand([3])


def dense_slices(t: poplar.Tensor, r: Region, dim: str, full_z: bool = False) -> poplar.Tensor:
    """``[gx, gy, Pz, Zt, size]``: the ``[Z][N]`` tensor's slice of each PN, ``N`` split
    along ``dim`` (broadcast over the other grid axis); ``full_z``: all of Z
    (``[gx, gy, Pz, Z, size]``, broadcast over the Z partitions)."""
    c0, c1 = r.cols(dim)
    g = r.grid[0] if dim == "x" else r.grid[1]
    size = r.size(dim)
    z = t.shape[0]
    sub = t[:, c0:c1]
    if full_z:
        s = sub.reshape((z, g, size)).dim_shuffle([1, 0, 2]).expand([1])  # [g, 1, Z, size]
        s = s.broadcast(r.pz, 1)
    else:
        s = sub.reshape((r.pz, z // r.pz, g, size)).dim_shuffle([2, 0, 1, 3])
    other = r.grid[1] if dim == "x" else r.grid[0]
    axis = 1 if dim == "x" else 0
    return s.expand([axis]).broadcast(other, axis)


def pn_slices(t: poplar.Tensor, r: Region, a: str, n: str) -> poplar.Tensor:
    """``[gx, gy, Pz, Zt, size]`` of a ``[Pa][Z][N]`` tensor: slab ``i`` belongs to
    partition ``i`` of ``a``, ``N`` is split along ``n`` (per-PN copies of a dense
    operand)."""
    a0, a1 = r.range(a)
    c0, c1 = r.cols(n)
    ga, gn, size = a1 - a0, (r.grid[0] if n == "x" else r.grid[1]), r.size(n)
    sub = t[a0:a1, :, c0:c1].reshape((ga, r.pz, t.shape[1] // r.pz, gn, size))
    return sub.dim_shuffle([0, 3, 1, 2, 4] if a == "x" else [3, 0, 1, 2, 4])


def pn_full_z(t: poplar.Tensor, r: Region, a: str, n: str) -> poplar.Tensor:
    """``[gx, gy, Pz, Z, size]`` of a ``[Pa][Z][N]`` per-PN tensor: every PN reads the
    whole batch of its (x, y) group, i.e. the Z slices held by the group's PNs."""
    a0, a1 = r.range(a)
    c0, c1 = r.cols(n)
    ga, gn, size = a1 - a0, (r.grid[0] if n == "x" else r.grid[1]), r.size(n)
    sub = t[a0:a1, :, c0:c1].reshape((ga, t.shape[1], gn, size))
    sub = sub.dim_shuffle([0, 2, 1, 3] if a == "x" else [2, 0, 1, 3])
    return sub.expand([2]).broadcast(r.pz, 2)


def partials_slices(t: poplar.Tensor, r: Region, a: str, n: str) -> poplar.Tensor:
    """``[gx, gy, Pz, size, Zt]`` of ``[Pa][N][Z]`` partials (row-major per PN): slab ``i``
    holds the partials of partition ``i`` of ``a``, ``N`` is split along ``n``."""
    a0, a1 = r.range(a)
    c0, c1 = r.cols(n)
    ga, gn, size = a1 - a0, (r.grid[0] if n == "x" else r.grid[1]), r.size(n)
    sub = t[a0:a1, c0:c1, :].reshape((ga, gn, size, r.pz, t.shape[2] // r.pz))
    return sub.dim_shuffle([0, 1, 3, 2, 4] if a == "x" else [1, 0, 3, 2, 4])


def segments(t: poplar.Tensor, n: int) -> poplar.Segments:
    """A bulk connection of a ``[gx, gy, Pz, *field]`` view: one field per PN."""
    per = t.num_elements // max(n, 1)
    return poplar.Segments(t, np.full(n, per, dtype=np.int64))


def expected_work(plan: Plan, r: Region, buckets: int, grad_a: bool) -> tuple[int, int]:
    """Rows and grain blocks of a matching sub-group per bucket under the uniform pattern
    the plan was made for (the planner's estimate): the cycle-estimate inputs."""
    x, y, _ = plan.params.shape
    bx, by = plan.block_dimensions
    blocks = exact_ceil((x // bx) * (y // by) * plan.params.nz_ratio)
    u = -(-blocks // plan.num_buckets)
    xg, yg = r.xt // bx, r.yt // by
    rows_grid = int(
        (
            occupancy(yg, xg, plan.params.nz_ratio)
            if grad_a
            else occupancy(xg, yg, plan.params.nz_ratio)
        )[0]
    )
    rows = max(-(-rows_grid // buckets), 1) if u > 0 else 0
    return rows, u


def product_states(
    plan: Plan, r: Region, words: int, buckets: int, grad_a: bool, z_grain: int | None = None
) -> dict[str, Any]:
    """State of a region's product vertices."""
    rows, blocks = expected_work(plan, r, buckets, grad_a)
    gx, gy, gz = r.grid
    states = {
        "sub_group_id": r.sub_group_ids(plan),
        "words": words,
        "nz_per_bucket": plan.nz_elems_per_bucket,
        "num_z": plan.z_tile,
        "est_rows": rows,
        "est_blocks": blocks,
        "grid_x": gx,
        "grid_y": gy,
        "grid_z": gz,
    }
    if z_grain is not None:
        states["z_grain"] = z_grain
    return states


# ---- tile mappings ----


def map_buckets(graph: poplar.Graph, t: poplar.Tensor, plan: Plan, tiles: np.ndarray) -> None:
    """A ``[buckets, len]`` tensor with row ``b`` on ``tiles[b]``."""
    graph.set_tile_mapping(t, np.broadcast_to(tiles[:, None], t.shape))


def pn_coords(plan: Plan, dim: str, n: int) -> np.ndarray:
    """Partition of each of the ``n`` elements of ``dim`` (x, y or z)."""
    starts = plan.starts(dim)
    return np.searchsorted(starts, np.arange(n), side="right") - 1


def map_pn_tensor(
    graph: poplar.Graph,
    t: poplar.Tensor,
    plan: Plan,
    a: str,
    n: str,
    tiles: np.ndarray,
    rows_first: bool = False,
) -> None:
    """A ``[Pa][Z][N]`` tensor (``[Pa][N][Z]`` with ``rows_first``; see
    :func:`pn_slices` / :func:`partials_slices`) on the tiles of its PNs."""
    _, py, pz = plan.partition.xyz
    nz_axes = (2, 1) if rows_first else (1, 2)  # axes of Z and N
    shape = [1, 1, 1]
    ia = np.arange(t.shape[0]).reshape(-1, 1, 1)
    iz = pn_coords(plan, "z", t.shape[nz_axes[0]])
    ina = pn_coords(plan, n, t.shape[nz_axes[1]])
    shape[nz_axes[0]] = -1
    iz = iz.reshape(shape)
    shape = [1, 1, 1]
    shape[nz_axes[1]] = -1
    ina = ina.reshape(shape)
    x, y = (ia, ina) if a == "x" else (ina, ia)
    graph.set_tile_mapping(t, np.broadcast_to(tiles[(x * py + y) * pz + iz], t.shape))


def map_dense_input(
    graph: poplar.Graph, t: poplar.Tensor, plan: Plan, dim: str, tiles: np.ndarray
) -> None:
    """A ``[Z][N]`` operand (``N`` split along ``dim``) spread over the PNs that read each
    of its slices (the X partitions of a Y slice, or the Y partitions of an X slice), at
    least 128 bytes per tile (as PopLibs' ``createFullyConnectedInput`` maps it)."""
    px, py, pz = plan.partition.xyz
    z, n = t.shape
    zp = pn_coords(plan, "z", z)[:, None]
    np_ = pn_coords(plan, dim, n)[None, :]
    zt = plan.z_tile
    sizes = plan.sizes(dim)[np_]
    pos = (np.arange(z)[:, None] - zp * zt) * sizes + (
        np.arange(n)[None, :] - plan.starts(dim)[np_]
    )
    sharers = px if dim == "y" else py
    least = -(-128 // t.dtype.size)
    chunk = np.maximum(-(-(zt * sizes) // sharers), least)
    other = np.minimum(pos // chunk, sharers - 1)
    x, y = (other, np_) if dim == "y" else (np_, other)
    graph.set_tile_mapping(t, tiles[(x * py + y) * pz + zp])
