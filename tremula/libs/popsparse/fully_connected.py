"""The device side of ``popsparse::dynamic``'s fully-connected layer (``FullyConnected.hpp``):
weights and inputs created on the plan's tiles, and the three passes.

Each pass (as PopLibs' ``FullyConnected.cpp`` builds it): the distribution compute set
(every PN's vertex reads the Pz buckets of its (x, y) group, or for GradW its own bucket,
and the dense slices of its partitions) and the propagation phase (:mod:`propagation`: read
at run time from the pattern's overflow info, it runs only as far as the pattern needs; a
pattern that stays in its Z groups runs the distribution alone, on the layer's dense
tensors), then the reduction of the partials over the partitions of the pass's Y
(:mod:`reduction`: PopLibs' conv reduction, which also casts to the data type) or, with one
such partition, a cast. GradA reuses the forward buckets (transposed roles; block buckets
are transposed first), GradW accumulates into partial buckets laid out like ``nz_values``
and casts them.

The ``useDense`` plan constraint runs the passes as poplin matmuls of the dense
``[Y][X]`` weights the nz tensor then holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tremula import poplar
from tremula.libs import poplin, popops
from tremula.libs.popsparse import codelets as cl
from tremula.libs.popsparse.device import (
    Layer,
    OpMetaData,
    Params,
    SparseTensor,
    bucket_rows,
    check_dense,
    check_meta_info,
    check_weights,
    make_layer,
    map_buckets,
    map_dense_input,
    map_pn_tensor,
    partials_slices,
)
from tremula.libs.popsparse.errors import PopsparseError
from tremula.libs.popsparse.options import Options
from tremula.libs.popsparse.passes import Bucket, Operand, Pass, distribute_and_propagate
from tremula.libs.popsparse.plan import PlanningCache
from tremula.libs.popsparse.reduction import reduce_partials

OptionsArg = Mapping[str, Any] | Options | None


# ---- created tensors ----


def create_fully_connected_weights(
    graph: poplar.Graph,
    input_type: Any,
    params: Params,
    options: OptionsArg = None,
    cache: PlanningCache | None = None,
    name: str = "",
) -> SparseTensor:
    """The sparse weights of a layer (``createFullyConnectedWeights``): ``meta_info``
    (uint16) and ``nz_values`` (``input_type``), each bucket on the tile of its PN and the
    overflow info on the control tile, laid out exactly as
    ``Partitioner.create_sparsity_data_impl`` makes them (write its arrays into the two
    tensors to load a pattern).

    Raises:
        PopsparseError: bad params or options; PlanningError: a type other than half or
            float, or a plan that cannot be made.
    """
    layer = make_layer(
        graph, input_type, params, options, cache, name, "create_fully_connected_weights"
    )
    g, plan = graph, layer.plan
    prefix = name or "weights"
    meta = g.add_variable(poplar.UNSIGNED_SHORT, (plan.meta_info_elems,), f"{prefix}/metaInfo")
    nz = g.add_variable(layer.dtype, (plan.nz_elems,), f"{prefix}/nzValues")
    if plan.use_dense:
        poplar.map_tensor_linearly(g, nz, grain_size=g.target.vector_width(layer.dtype.size))
    else:
        tiles = plan.bucket_tiles("fwd")
        head = plan.num_overflow_info_elems
        g.set_tile_mapping(meta[:head], plan.control_tile)
        nb = plan.num_buckets
        map_buckets(g, meta[head:].reshape((nb, plan.meta_info_elems_per_bucket)), plan, tiles)
        map_buckets(g, nz.reshape((nb, plan.nz_elems_per_bucket)), plan, tiles)
    return SparseTensor(meta, nz, OpMetaData(params, plan.input_type, layer.options))


def create_fully_connected_input(
    graph: poplar.Graph,
    input_type: Any,
    params: Params,
    options: OptionsArg = None,
    cache: PlanningCache | None = None,
    name: str = "",
) -> poplar.Tensor:
    """The ``[batch][input_channels]`` activations of a layer, spread over the tiles that
    read each slice (``createFullyConnectedInput``)."""
    layer = make_layer(
        graph, input_type, params, options, cache, name, "create_fully_connected_input"
    )
    _, y, z = layer.params.shape
    t = graph.add_variable(layer.dtype, (z, y), name or "input")
    if layer.plan.use_dense:
        poplar.map_tensor_linearly(graph, t, grain_size=graph.target.vector_width(layer.dtype.size))
    else:
        map_dense_input(graph, t, layer.plan, "y", layer.plan.bucket_tiles("fwd"))
    return t


# ---- the passes ----


def fully_connected_fwd(
    graph: poplar.Graph,
    weights: SparseTensor,
    activations: poplar.Tensor,
    params: Params,
    prog: poplar.Sequence,
    options: OptionsArg = None,
    cache: PlanningCache | None = None,
    name: str = "",
) -> poplar.Tensor:
    """``[batch][output_channels] = activations W^T`` (``fullyConnectedFwd``).

    Args:
        graph: the graph.
        weights: the layer's weights (:func:`create_fully_connected_weights`, or a
            SparseTensor of two tensors shaped and typed as those).
        activations: ``[batch][input_channels]`` of the weights' type.
        params: the layer.
        prog: the sequence the pass is appended to.
        options: the options the weights were created and partitioned with.
        cache: a planning cache.
        name: debug prefix.

    Raises:
        PopsparseError: weights made for other params, type or options; shapes or types
            that are not the layer's; bad options.
    """
    layer = _layer(graph, weights, params, options, cache, name, "fully_connected_fwd")
    x, y, z = layer.params.shape
    act = check_dense(layer, activations, (z, y), "activations")
    if layer.plan.use_dense:
        w = weights.nz_values.reshape((y, x))
        return poplin.matmul(graph, act, w, prog, name=layer.prefix)
    return _sparse_pass(layer, prog, "fwd", weights, act)


def fully_connected_grad_a(
    graph: poplar.Graph,
    weights: SparseTensor,
    grad_out: poplar.Tensor,
    params: Params,
    prog: poplar.Sequence,
    options: OptionsArg = None,
    cache: PlanningCache | None = None,
    name: str = "",
) -> poplar.Tensor:
    """``[batch][input_channels] = grad_out W`` (``fullyConnectedGradA``), from the forward
    buckets. ``grad_out`` is ``[batch][output_channels]``; arguments as for the forward
    pass (the options should have ``doGradAPass``, which the plan is made for)."""
    layer = _layer(graph, weights, params, options, cache, name, "fully_connected_grad_a")
    x, y, z = layer.params.shape
    qg = check_dense(layer, grad_out, (z, x), "grad_out")
    if layer.plan.use_dense:
        w = weights.nz_values.reshape((y, x)).transpose()
        return poplin.matmul(graph, qg, w, prog, name=layer.prefix)
    return _sparse_pass(layer, prog, "grad_a", weights, qg)


def fully_connected_sparse_grad_w(
    graph: poplar.Graph,
    meta_info: poplar.Tensor | SparseTensor,
    grad_out: poplar.Tensor,
    activations: poplar.Tensor,
    params: Params,
    prog: poplar.Sequence,
    options: OptionsArg = None,
    cache: PlanningCache | None = None,
    name: str = "",
) -> poplar.Tensor:
    """The weights' gradient at the pattern's positions, ``(grad_out^T activations)`` at
    every non-zero, laid out exactly like ``nz_values`` (padding slots hold zeros):
    ``fullyConnectedSparseGradW``. ``meta_info`` is the weights' meta-info tensor (or the
    SparseTensor, whose creation key is then checked); the type is ``grad_out``'s."""
    where = "fully_connected_sparse_grad_w"
    if not isinstance(grad_out, poplar.Tensor):
        raise PopsparseError(f"{where}: grad_out must be a poplar.Tensor, got {grad_out!r}")
    layer = make_layer(graph, grad_out.dtype, params, options, cache, name, where)
    if isinstance(meta_info, SparseTensor):
        meta_info = check_weights(layer, meta_info).meta_info
    meta = check_meta_info(layer, meta_info)
    x, y, z = layer.params.shape
    qg = check_dense(layer, grad_out, (z, x), "grad_out")
    act = check_dense(layer, activations, (z, y), "activations")
    if layer.plan.use_dense:
        out = poplin.matmul(graph, act.transpose(), qg, prog, name=layer.prefix)
        return out.reshape((x * y,))
    return _grad_w(layer, prog, meta, _meta_info_rows(layer, meta, "grad_w"), qg, act)


def _layer(
    graph: poplar.Graph,
    weights: Any,
    params: Params,
    options: OptionsArg,
    cache: PlanningCache | None,
    name: str,
    where: str,
) -> Layer:
    nz = getattr(weights, "nz_values", None)
    dtype = getattr(nz, "dtype", None)
    layer = make_layer(
        graph, dtype if dtype is not None else "float", params, options, cache, name, where
    )
    check_weights(layer, weights)
    return layer


# ---- the sparse passes ----


def _meta_info_rows(layer: Layer, meta_info: poplar.Tensor, kind: str) -> poplar.Tensor:
    """``[buckets, words]``: the part of every bucket's meta-info the pass reads (the
    element-wise GradA meta-info when the plan has it, else the forward one)."""
    plan = layer.plan
    offset, words = 0, plan.fwd_meta_info_elems_per_bucket
    if kind == "grad_a" and plan.has_grad_a_meta_info:
        offset, words = words, plan.grad_a_meta_info_elems_per_bucket
    rows = meta_info[plan.num_overflow_info_elems :]
    return bucket_rows(rows, plan, offset, plan.meta_info_elems_per_bucket, words)


def _sparse_pass(
    layer: Layer,
    prog: poplar.Sequence,
    kind: str,
    weights: SparseTensor,
    dense: poplar.Tensor,
) -> poplar.Tensor:
    """Fwd or GradA: partials from the buckets and the dense input, then the reduction."""
    g, plan = layer.graph, layer.plan
    x, y, z = layer.params.shape
    px = plan.partition.xyz[0]
    nb = plan.num_buckets
    mi_rows = _meta_info_rows(layer, weights.meta_info, kind)
    tiles = plan.bucket_tiles(kind)
    nz_rows = weights.nz_values.reshape((nb, plan.nz_elems_per_bucket))
    method = plan.method.fwd if kind == "fwd" else plan.method.grad_a
    if kind == "grad_a" and plan.method.is_block:
        nz_rows = _transpose_blocks(layer, prog, nz_rows, tiles)
    # forward: partials [Py][X][Z] from S slices; GradA: [Px][Y][Z] from Qgrad slices
    red, out_dim, in_dim = ("y", "x", "y") if kind == "fwd" else ("x", "y", "x")
    sizes = {"x": x, "y": y}
    partials = g.add_variable(
        layer.partials,
        (plan.partition.y if red == "y" else px, sizes[out_dim], z),
        f"{layer.prefix}/partials",
    )
    map_pn_tensor(g, partials, plan, red, out_dim, tiles, rows_first=True)
    other = "x" if in_dim == "y" else "y"  # the dim of the PN buffers' slabs
    sparse_pass = Pass(
        kind,
        method,
        (out_dim, in_dim),
        buckets=(Bucket("meta_info", mi_rows, "metaInfo"), Bucket("nz", nz_rows, "nz")),
        operands=(Operand("s", dense, in_dim, other, "dense"),),
        fixed=lambda r: {"q": partials_slices(partials, r, red, out_dim)},
    )
    distribute_and_propagate(layer, prog, weights.meta_info, sparse_pass)
    return reduce_partials(layer, prog, partials, red, tiles)


def _grad_w(
    layer: Layer,
    prog: poplar.Sequence,
    meta_info: poplar.Tensor,
    mi_rows: poplar.Tensor,
    qg: poplar.Tensor,
    act: poplar.Tensor,
) -> poplar.Tensor:
    """GradW: each PN's vertex accumulates the blocks of its own bucket over the whole batch
    (the distribution), then the partial buckets travel with their meta-info (the
    propagation, each PN adding its Z slice) and come home; the result is cast."""
    g, plan = layer.graph, layer.plan
    nb, nzb = plan.num_buckets, plan.nz_elems_per_bucket
    method = plan.method.grad_w
    acc = g.add_variable(layer.partials, (nb, nzb), f"{layer.prefix}/partials")
    map_buckets(g, acc, plan, plan.bucket_tiles("grad_w"))
    grad_w = Pass(
        "grad_w",
        method,
        ("x", "y"),
        buckets=(Bucket("meta_info", mi_rows, "metaInfo"), Bucket("acc", acc, "partials", True)),
        operands=(Operand("qgrad", qg, "x", "y", "qgrad"), Operand("s", act, "y", "x", "s")),
        whole_batch=True,
        z_grain=plan.method.grouping[3] if method == "GradWAMPBlock" else None,
    )
    distribute_and_propagate(layer, prog, meta_info, grad_w)
    flat = acc.reshape((nb * nzb,))
    if layer.partials is layer.dtype:
        return flat
    return popops.cast(layer.graph, flat, layer.dtype, prog, name=f"{layer.prefix}/cast")


def _transpose_blocks(
    layer: Layer, prog: poplar.Sequence, nz_rows: poplar.Tensor, tiles: np.ndarray
) -> poplar.Tensor:
    """The buckets with every block transposed (block GradA reads ``B^T``)."""
    g, plan = layer.graph, layer.plan
    prefix = layer.prefix
    out = g.add_variable(layer.dtype, nz_rows.shape, f"{prefix}/nzTransposed")
    map_buckets(g, out, plan, tiles)
    cs = g.add_compute_set(f"{prefix}/transposeBuckets")
    bx, by = plan.block_dimensions
    g.add_vertices(
        cs,
        f"popsparse::BucketTranspose<{layer.dtype.name},{cl.shape_arg(bx, by)}>",
        {"src": nz_rows, "dst": out},
        tiles,
    )
    prog.add(poplar.Execute(cs, name=f"{prefix}/transposeBuckets"))
    return out
