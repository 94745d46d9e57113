"""Building a planned matmul into a graph: the output and partials variables, the block
products of every serial step and the stage-2 reduction, and created operands.

Everything here runs after validation (``matmul.py``), in the planned frame (``M`` and
``N`` exchanged when the plan swaps). Each region of equal blocks (``layout.py``) is one
bulk ``add_vertices`` call whose fields are strided views of the operands, the partials and
the output: ``[*grid, *block]`` tensors (the A blocks broadcast along ``N``, the B blocks
along ``M``) connected as :class:`poplar.Segments`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tremula import poplar
from tremula.libs import util
from tremula.libs.poplin import codelets as cl
from tremula.libs.poplin.layout import Geometry, Region
from tremula.libs.poplin.plan import MatMulParams, Plan, plan_matmul
from tremula.libs.popops.fill import zero


@dataclass(frozen=True)
class MatMulCall:
    """A validated matmul in the user's frame: ``[G, M, K] @ [G, K, N]``."""

    graph: poplar.Graph
    a: poplar.Tensor  # [G, M, K]
    b: poplar.Tensor  # [G, K, N]
    in_type: poplar.Type
    out_type: poplar.Type
    partials: poplar.Type
    params: MatMulParams
    name: str


def run(
    call: MatMulCall, prog: poplar.Sequence, acc: poplar.Tensor | None, scale: float
) -> poplar.Tensor:
    """Add the matmul (or, with ``acc``, the accumulation into ``acc``); returns the
    ``[G, M, N]`` result."""
    graph, p = call.graph, call.params
    prefix = call.name or "matmul"
    if p.groups * p.m * p.n == 0 or (p.k == 0 and acc is not None):
        if acc is not None:
            return acc
        # an empty result needs no variable (and no element of one)
        empty = np.zeros((p.groups, p.m, p.n), dtype=np.int64)
        return poplar.Tensor(graph.state, call.out_type, empty)
    if p.k == 0:  # the product of an empty inner dimension is zero
        out = graph.add_variable(call.out_type, (p.groups, p.m, p.n), f"{prefix}/out")
        poplar.map_tensor_linearly(graph, out)
        return zero(graph, out, prog, f"{prefix}/zero")
    util.ensure_codelets(graph, cl.CODELETS)
    plan = plan_matmul(p, graph.target)
    ap, bp = (call.a, call.b) if not plan.swap else (_t(call.b), _t(call.a))
    user = None if acc is None else (acc if not plan.swap else _t(acc))
    steps = {"": _one_step, "k": _k_loop, "n": _n_loop}[plan.loop]
    cp = steps(call, prog, plan, (ap, bp, user), None if acc is None else scale)
    return cp if not plan.swap else _t(cp)


def _output(call: MatMulCall, geo: Geometry, user: poplar.Tensor | None, tiles: Any) -> Any:
    """The ``[G, M, N]`` result of the planned frame: ``user`` (an accumulation) or a new
    variable mapped on ``tiles``."""
    if user is not None:
        return user
    cp = call.graph.add_variable(call.out_type, (geo.G, geo.M, geo.N), f"{_prefix(call)}/out")
    call.graph.set_tile_mapping(cp, tiles)
    return cp


def _prefix(call: MatMulCall) -> str:
    return call.name or "matmul"


def _partials(call: MatMulCall, geo: Geometry) -> poplar.Tensor:
    parts = call.graph.add_variable(
        call.partials, (geo.nk, geo.G, geo.M, geo.N), f"{_prefix(call)}/partials"
    )
    call.graph.set_tile_mapping(parts, geo.partials_tiles())
    return parts


def _products(
    call: MatMulCall,
    prog: poplar.Sequence,
    geo: Geometry,
    s: int,
    tensors: tuple[poplar.Tensor, ...],
    a_local: poplar.Tensor | None = None,
    name: str = "",
) -> None:
    """The compute set of serial step ``s``'s block products (``tensors``: A, B and the
    partials they write; ``a_local``: A's copy on each ``N`` block's tiles)."""
    cs = call.graph.add_compute_set(f"{_prefix(call)}/partials{name}")
    vtype = cl.PARTIAL_TYPES[(geo.plan.method, False)] + f"<{call.in_type},{tensors[2].dtype}"
    names: set[str] = set()
    for region in geo.product_regions(s):
        _add_products(call.graph, cs, geo, region, vtype, tensors, names, a_local)
    prog.add(poplar.Execute(cs))


def _one_step(
    call: MatMulCall,
    prog: poplar.Sequence,
    plan: Plan,
    tensors: tuple[Any, ...],
    scale: float | None,
) -> poplar.Tensor:
    """One step's products (or, ``a_local`` given, those of an ``"n"`` loop's step) and
    stage 2 into the output."""
    ap, bp, user = tensors
    geo = Geometry(plan)
    stage2 = plan.stage2 or user is not None
    cp = _output(call, geo, user, geo.output_tiles(stage2))
    parts = _partials(call, geo) if stage2 else cp.expand([0])
    _products(call, prog, geo, 0, (ap, bp, parts))
    if stage2:
        _add_stage2(call.graph, prog, geo, (cp, parts), scale, _prefix(call))
    return cp


def _k_loop(
    call: MatMulCall,
    prog: poplar.Sequence,
    plan: Plan,
    tensors: tuple[Any, ...],
    scale: float | None,
) -> poplar.Tensor:
    """PopLibs' input-channel serial split: each step's products and a reduction of its
    partials into an accumulator of the partials type (written by the first step, updated
    by the others), then the accumulator cast into the output."""
    ap, bp, user = tensors
    geo = Geometry(plan)
    cp = _output(call, geo, user, geo.output_tiles(True))
    own = user is None and call.out_type == call.partials
    acc = cp
    if not own:
        acc = call.graph.add_variable(call.partials, cp.shape, f"{_prefix(call)}/accumulator")
        call.graph.set_tile_mapping(acc, geo.output_tiles(True))
    parts = _partials(call, geo)
    for s in range(plan.serial):
        _products(call, prog, geo, s, (ap, bp, parts), name=f"/s{s}")
        update = None if s == 0 else 1.0
        _add_stage2(call.graph, prog, geo, (acc, parts), update, _prefix(call), f"/s{s}")
    if not own:
        _add_stage2(call.graph, prog, geo, (cp, acc.expand([0])), scale, _prefix(call), "/cast")
    return cp


def _n_loop(
    call: MatMulCall,
    prog: poplar.Sequence,
    plan: Plan,
    tensors: tuple[Any, ...],
    scale: float | None,
) -> poplar.Tensor:
    """PopLibs' output-channel serial split: A's blocks copied to the tiles of every ``N``
    block before the loop; step ``s`` computes columns ``s * step_n`` onwards of every
    block (same tiles, one step's partials) and reduces them into the output's columns."""
    ap, bp, user = tensors
    graph, geo, sub = call.graph, Geometry(plan), Geometry(plan.n_step_plan())
    steps, width = plan.serial, plan.step_n
    stage2 = plan.stage2 or user is not None
    tiles = sub.output_tiles(stage2).reshape(sub.G, sub.M, plan.blocks_n, 1, width)
    tiles = np.broadcast_to(tiles, (*tiles.shape[:3], steps, width))
    cp = _output(call, geo, user, tiles.reshape(geo.G, geo.M, geo.N))
    a_local = None
    if plan.blocks_n > 1:
        shape = (plan.blocks_n, *ap.shape)
        a_local = graph.add_variable(call.in_type, shape, f"{_prefix(call)}/a")
        graph.set_tile_mapping(a_local, sub.local_a_tiles())
        prog.add(poplar.Copy(ap.expand([0]).broadcast(plan.blocks_n, 0), a_local))
    parts = _partials(call, sub) if stage2 else None

    def cols(t: poplar.Tensor, s: int) -> poplar.Tensor:
        x = t.reshape((*t.shape[:-1], plan.blocks_n, plan.block_n))
        return x[..., s * width : (s + 1) * width].reshape((*t.shape[:-1], sub.N))

    for s in range(steps):
        out = cols(cp, s)
        dest = parts if parts is not None else out.expand([0])
        _products(call, prog, sub, 0, (ap, cols(bp, s), dest), a_local, f"/s{s}")
        if parts is not None:
            _add_stage2(graph, prog, sub, (out, parts), scale, _prefix(call), f"/s{s}")
    return cp


def _add_stage2(
    graph: poplar.Graph,
    prog: poplar.Sequence,
    geo: Geometry,
    tensors: tuple[poplar.Tensor, poplar.Tensor],
    scale: float | None,
    prefix: str,
    name: str = "",
) -> None:
    """The compute set summing the partials (a ``[P, G, M, N]`` tensor) into the output
    (``+= scale *`` the sums when ``scale`` is given)."""
    cs = graph.add_compute_set(f"{prefix}/reduce{name}")
    names: set[str] = set()
    for region in geo.reduce_regions():
        _add_reduce(graph, cs, geo, region, tensors, scale, names)
    prog.add(poplar.Execute(cs))


def _t(t: poplar.Tensor) -> poplar.Tensor:
    return t.dim_shuffle((0, 2, 1))


def _window(t: poplar.Tensor, r: Region, rows: str, cols: str) -> poplar.Tensor:
    """The part of a ``[G, rows, cols]`` tensor under region ``r`` (``rows`` and ``cols``
    name the region's spans), with every dimension split into ``(blocks, block)``."""
    g, x, y = r.g, getattr(r, rows), getattr(r, cols)
    part = t[g.start : g.stop, x.start : x.stop, y.start : y.stop]
    return part.reshape((g.count, g.size, x.count, x.size, y.count, y.size))


def _type_name(base: str, shape: tuple[int, ...], names: set[str]) -> str:
    """``base,SHAPE>``, the SHAPE tagged ``.i`` when an earlier region of the compute set
    has the same shape: each region must be a vertex type of its own (a group whose fields
    are views)."""
    arg = cl.shape_arg(shape)
    name, i = f"{base},{arg}>", 1
    while name in names:
        name, i = f"{base},{arg}.{i}>", i + 1
    names.add(name)
    return name


def _grid_fields(r: Region, lengths: dict[str, int], tensors: dict[str, Any]) -> dict:
    n = r.num_vertices
    fields: dict[str, Any] = {
        name: poplar.Segments(t, np.full(n, lengths[name])) for name, t in tensors.items()
    }
    fields.update(zip(cl.GRID, r.grid))
    return fields


def _add_products(
    graph: poplar.Graph,
    cs: poplar.ComputeSet,
    geo: Geometry,
    r: Region,
    vtype: str,
    tensors: tuple[poplar.Tensor, ...],
    names: set[str],
    a_local: poplar.Tensor | None = None,
) -> None:
    """The block products of one region: ``[Ig, Im, In, Ik, g, m, k]`` views of A (one
    block per ``(gi, mi, K slice)``, broadcast along ``N``, or the blocks of ``a_local``,
    A's copy per ``N`` block), likewise B (broadcast along ``M``) and the partials."""
    ap, bp, parts = tensors
    Ig, Im, In, Ik = r.grid
    g, m, n, k = r.g.size, r.m.size, r.n.size, r.k.size
    if a_local is None:
        a = _window(ap, r, "m", "k").dim_shuffle((0, 2, 4, 1, 3, 5)).expand([2]).broadcast(In, 2)
    else:
        a = a_local[r.n.first : r.n.first + In, r.g.start : r.g.stop, r.m.start : r.m.stop]
        a = a[..., r.k.start : r.k.stop].reshape((In, Ig, g, Im, m, Ik, k))
        a = a.dim_shuffle((1, 3, 0, 5, 2, 4, 6))
    b = _window(bp, r, "k", "n").dim_shuffle((0, 4, 2, 1, 3, 5)).expand([1]).broadcast(Im, 1)
    c = parts[r.k.first : r.k.first + Ik]
    c = c[:, r.g.start : r.g.stop, r.m.start : r.m.stop, r.n.start : r.n.stop]
    c = c.reshape((Ik, Ig, g, Im, m, In, n)).dim_shuffle((1, 3, 5, 0, 2, 4, 6))
    lengths = {"a": g * m * k, "b": g * k * n, "c": g * m * n}
    fields = _grid_fields(r, lengths, {"a": a, "b": b, "c": c})
    name = _type_name(vtype, (g, m, k, n), names)
    graph.add_vertices(cs, name, fields, geo.grid_tiles(r))


def _pieces(t: poplar.Tensor, r: Region, split: str) -> poplar.Tensor:
    """``[Ig, Im, In, Ip, *lead, g, rows, cols]``: the stage-2 pieces of region ``r`` of a
    ``[*lead, G, M, N]`` tensor (pieces cut along ``split`` of every block)."""
    lead = t.rank - 3
    g, m, n, p = r.g, r.m, r.n, r.k
    x = t[..., g.start : g.stop, m.start : m.stop, n.start : n.stop]
    x = x.reshape((*t.shape[:lead], g.count, g.size, m.count, m.size, n.count, n.size))
    cut = slice(p.start, p.stop)
    if split == "m":
        x = x[..., cut, :, :].reshape((*x.shape[:-3], p.count, p.size, *x.shape[-2:]))
        grid, block = (0, 2, 5, 3), (1, 4, 6)
    else:
        x = x[..., cut].reshape((*x.shape[:-1], p.count, p.size))
        grid, block = (0, 2, 4, 5), (1, 3, 6)
    perm = (*(i + lead for i in grid), *range(lead), *(i + lead for i in block))
    return x.dim_shuffle(perm)


def _add_reduce(
    graph: poplar.Graph,
    cs: poplar.ComputeSet,
    geo: Geometry,
    r: Region,
    tensors: tuple[poplar.Tensor, poplar.Tensor],
    scale: float | None,
    names: set[str],
) -> None:
    """Stage 2 for one region of pieces: each vertex sums the ``blocks_k`` partials of its
    piece of a block into the piece of the output."""
    cp, parts = tensors
    out = _pieces(cp, r, geo.plan.split)
    part = _pieces(parts, r, geo.plan.split)
    piece = out.shape[4:]
    size = int(np.prod(piece))
    count = parts.shape[0]
    lengths = {"partials": count * size, "out": size}
    fields = _grid_fields(r, lengths, {"partials": part, "out": out})
    if scale is not None:
        fields["scale"] = scale
    vtype = "poplin::ReducePartials" + ("Acc" if scale is not None else "")
    name = _type_name(f"{vtype}<{parts.dtype},{cp.dtype}", (count, *piece), names)
    graph.add_vertices(cs, name, fields, geo.grid_tiles(r))


def create_operand(
    graph: poplar.Graph, params: MatMulParams, in_type: poplar.Type, side: str, name: str
) -> poplar.Tensor:
    """A ``[G, M, K]`` (``side == "lhs"``) or ``[G, K, N]`` operand laid out and mapped as
    the plan of ``params`` reads it: a row-major variable of the planned frame (so that the
    products' fields are strided views of it), each block spread over its readers."""
    plan = plan_matmul(params, graph.target)
    geo = Geometry(plan)
    role = "a" if (side == "lhs") != plan.swap else "b"
    shape = (geo.G, geo.M, geo.K) if role == "a" else (geo.G, geo.K, geo.N)
    var = graph.add_variable(in_type, shape, name)
    graph.set_tile_mapping(var, geo.operand_tiles(role))
    return _t(var) if plan.swap else var
