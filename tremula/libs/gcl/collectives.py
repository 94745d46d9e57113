"""GCL's collectives across the replicas of a replicated graph, over replica groups.

Each function validates its arguments before adding anything to the graph, appends its
programs to ``prog`` and returns its output tensor. ``group`` is ``None`` (all replicas), a
:class:`CommGroup` or a constant :class:`ReplicaGrouping`. The algorithms are rings over
each group, run for all groups at once: each step is one ``CrossReplicaCopy`` (a global
exchange over the IPU-links) whose replica map covers every group, plus compute sets of the
ring vertices combining or placing the chunk received (``codelets.py``).

Link traffic per replica, for ``n`` bytes and groups of ``G`` (``C = ceil(n / G)``):
``all_reduce`` ``2 (G - 1) C``, ``reduce_scatter`` ``(G - 1) C``, ``all_gather`` and
``all_to_all`` ``(G - 1) n`` (``n`` per row for all_to_all), ``broadcast``
``ceil(log2 G) n`` (a binomial tree).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tremula import poplar
from tremula.libs import util
from tremula.libs.gcl.errors import CollectiveError, GroupingError
from tremula.libs.gcl.grouping import CommGroup, ReplicaGrouping
from tremula.libs.gcl.operators import (
    COLLECTIVE_RULES,
    CollectiveOperator,
    as_operator,
    check_operator,
)
from tremula.libs.gcl.ring import Fragments, Layout, RingBuilder, block_size, spread_blocks

Group = CommGroup | ReplicaGrouping | None

# GCL's "method" option: the ring direction (other GCL methods are not modelled)
_METHODS = {"auto": 1, "clockwise_ring": 1, "anticlockwise_ring": -1}


def resolve_group(graph: poplar.Graph, group: Group, where: str) -> ReplicaGrouping:
    """The constant grouping of the graph's replicas that ``group`` names.

    Raises:
        GroupingError: a CommGroup that does not divide the replicas, a grouping of
            another replica count, or a non-constant grouping.
    """
    R = graph.replication_factor
    if group is None:
        return ReplicaGrouping.all(R)
    if isinstance(group, CommGroup):
        try:
            return group.to_grouping(R)
        except GroupingError as err:
            raise GroupingError(f"{where}: {err}") from None
    if not isinstance(group, ReplicaGrouping):
        raise GroupingError(
            f"{where}: group must be None, a CommGroup or a ReplicaGrouping, got "
            f"{type(group).__name__}"
        )
    if group.num_replicas != R:
        raise GroupingError(
            f"{where}: {group!r} groups {group.num_replicas} replicas; the graph has {R}"
        )
    if not group.is_const:
        raise GroupingError(
            f"{where}: {group!r} is not a constant-stride grouping; collectives need "
            f"groups r0, r0 + stride, ... (use its const_rg or a constant grouping)"
        )
    return group


def _direction(options: dict[str, Any] | None, where: str) -> int:
    options = dict(options or {})
    unknown = sorted(set(options) - {"method"})
    if unknown:
        raise CollectiveError(f"{where}: unknown option(s) {unknown}; supported: ['method']")
    method = str(options.get("method", "auto"))
    if method not in _METHODS:
        raise CollectiveError(
            f"{where}: option method={method!r} unsupported; expected one of {sorted(_METHODS)}"
        )
    return _METHODS[method]


def _prepare(
    graph: poplar.Graph,
    t: poplar.Tensor,
    prog: poplar.Sequence,
    group: Group,
    options: dict[str, Any] | None,
    where: str,
) -> tuple[ReplicaGrouping, int]:
    if not isinstance(graph, poplar.Graph):
        raise CollectiveError(f"{where}: graph must be a poplar.Graph, got {type(graph).__name__}")
    if not isinstance(t, poplar.Tensor) or t.graph is not graph.state:
        raise CollectiveError(f"{where}: expected a tensor of this graph, got {t!r}")
    if not isinstance(prog, poplar.Sequence):
        raise CollectiveError(
            f"{where}: prog must be a poplar.Sequence to append to, got {type(prog).__name__}"
        )
    tiles = graph.tiles_of(t)
    if tiles.size and tiles.min() < 0:
        first = int(np.flatnonzero(tiles.reshape(-1) < 0)[0])
        raise CollectiveError(f"{where}: {t!r} is not mapped to tiles (flat element {first})")
    return resolve_group(graph, group, where), _direction(options, where)


def _builder(
    graph: poplar.Graph,
    rg: ReplicaGrouping,
    t: poplar.Tensor,
    columns: int,
    prefix: str,
    direction: int,
) -> RingBuilder:
    """A builder over ``columns`` chunk columns spread over the tiles holding ``t``."""
    layout = Layout.spread(graph, t, columns, rg.group_size)
    return RingBuilder(graph, rg, layout, t.dtype, prefix, direction)


def _reduce_scatter_steps(
    b: RingBuilder, work: poplar.Tensor, op: CollectiveOperator
) -> tuple[poplar.Tensor, poplar.Tensor]:
    """Ring reduce-scatter of ``work``'s chunks: replica of index ``p`` ends with the
    reduced chunk ``p`` in the first tensor returned (the second is the spare buffer).
    Each step sends the partial from one chunk buffer into the other and reduces it there,
    in place, with the replica's own chunk; the buffers swap roles every step."""
    graph, G = b.graph, b.G
    acc = b.layout.chunk(graph, b.dtype, f"{b.prefix}/out")
    if op is CollectiveOperator.LOCAL:
        b.select(work, acc, op, 0, "local")
        return acc, acc
    rx = b.layout.chunk(graph, b.dtype, f"{b.prefix}/received")
    b.select(work, acc, op, -1, "reduceScatter/start")
    mean = COLLECTIVE_RULES[op].mean
    for s in range(G - 1):
        b.cross(acc, rx, 1, f"reduceScatter/send{s}")
        scale = 1.0 / G if mean and s == G - 2 else 1.0
        b.combine(work, rx, op, -(s + 2), scale, f"reduceScatter/combine{s}")
        acc, rx = rx, acc
    return acc, rx


def _all_gather_steps(
    b: RingBuilder, work: poplar.Tensor, mine: poplar.Tensor, spare: poplar.Tensor
) -> None:
    """Ring all-gather: each replica's ``mine`` lands in column ``index`` of every group
    member's ``work``."""
    b.place(work, mine, 0, "allGather/own")
    src, dst = mine, spare
    for s in range(b.G - 1):
        b.cross(src, dst, 1, f"allGather/send{s}")
        b.place(work, dst, -(s + 1), f"allGather/place{s}")
        src, dst = dst, src


def _all_reduce_into(
    graph: poplar.Graph,
    t: poplar.Tensor,
    out: poplar.Tensor,
    op: CollectiveOperator,
    rg: ReplicaGrouping,
    direction: int,
    prefix: str,
    prog: poplar.Sequence,
) -> None:
    """The ring on ``t``'s fragments where they lie (:class:`Fragments`): the reduce-scatter
    reads them from ``t``, the all-gather places the result into ``out``'s (mapped like
    ``t``); only the small remainder goes through a work buffer."""
    n, G = t.num_elements, rg.group_size
    if op is CollectiveOperator.LOCAL or n == 0:
        if out is not t and n:
            prog.add(poplar.Copy(t, out, name=f"{prefix}/local"))
        return
    L = block_size(t.dtype)
    frag = Fragments.of(graph, t, G, L)
    rest_columns = -(-frag.rest.size // G)
    rest = Layout.of_blocks(
        graph, spread_blocks(graph, t, -(-rest_columns // L)), rest_columns, G, L
    )
    tiles = np.concatenate([frag.tiles, rest.block_tiles])
    layout = Layout.of_blocks(graph, tiles, frag.blocks * L + rest_columns, G, L)
    b = RingBuilder(graph, rg, layout, t.dtype, prefix, direction)
    srcs = [t.flatten()[frag.main]] if frag.blocks else []
    dsts = [out.flatten()[frag.main]] if frag.blocks else []
    if rest_columns:
        buffer = rest.work(graph, t.dtype, f"{prefix}/work")
        srcs.append(buffer)
        dsts.append(buffer)
        b.to_work(t.flatten()[frag.rest], buffer, "toWork", rest)
    src = poplar.concat(srcs, 1)
    mine, spare = _reduce_scatter_steps(b, src, op)
    _all_gather_steps(b, src if out is t else poplar.concat(dsts, 1), mine, spare)
    if rest_columns:
        b.from_work(buffer, out.flatten()[frag.rest], "fromWork", rest)
    b.flush(prog)


def all_reduce(
    graph: poplar.Graph,
    t: poplar.Tensor,
    op: CollectiveOperator | str,
    prog: poplar.Sequence,
    group: Group = None,
    name: str = "",
    options: dict[str, Any] | None = None,
) -> poplar.Tensor:
    """Reduce ``t`` over the replicas of each group; every member gets the result.

    A ring reduce-scatter then a ring all-gather over chunks of ``ceil(n / G)`` elements
    (link traffic ``2 (G - 1) / G`` of ``t`` per replica).

    Args:
        graph: the replicated graph.
        t: the tensor to reduce (any shape, mapped).
        op: a :class:`CollectiveOperator` (or its name); LOCAL copies ``t``.
        prog: the sequence the programs are appended to.
        group: ``None`` (all replicas), a CommGroup or a constant ReplicaGrouping.
        name: debug prefix of the compute sets and copies.
        options: ``{"method": "auto" | "clockwise_ring" | "anticlockwise_ring"}``.

    Returns:
        A new tensor shaped and mapped like ``t``.

    Raises:
        CollectiveError: bad tensor, options, or an operator that does not apply to the type.
        GroupingError: a group that does not fit the replicas or is not constant.
    """
    op = as_operator(op)
    rg, direction = _prepare(graph, t, prog, group, options, "all_reduce")
    check_operator(op, t, "all_reduce")
    prefix = name or "allReduce"
    out = util.create_output(graph, t.dtype, t.shape, f"{prefix}/result", like=t)
    _all_reduce_into(graph, t, out, op, rg, direction, prefix, prog)
    return out


def all_reduce_in_place(
    graph: poplar.Graph,
    t: poplar.Tensor,
    op: CollectiveOperator | str,
    prog: poplar.Sequence,
    group: Group = None,
    name: str = "",
    options: dict[str, Any] | None = None,
) -> poplar.Tensor:
    """:func:`all_reduce` writing the result into ``t``; returns ``t``."""
    op = as_operator(op)
    rg, direction = _prepare(graph, t, prog, group, options, "all_reduce_in_place")
    check_operator(op, t, "all_reduce_in_place")
    _all_reduce_into(graph, t, t, op, rg, direction, name or "allReduceInPlace", prog)
    return t


def reduce_scatter(
    graph: poplar.Graph,
    t: poplar.Tensor,
    op: CollectiveOperator | str,
    prog: poplar.Sequence,
    group: Group = None,
    name: str = "",
    options: dict[str, Any] | None = None,
) -> poplar.Tensor:
    """Reduce ``t`` over each group and scatter the result: ``t`` is flattened and
    zero-padded to ``G * C`` elements (``C = ceil(n / G)``); the replica of index ``k`` in
    its group gets the ``k``-th reduced chunk. LOCAL takes chunk ``k`` of the replica's own
    ``t`` without reducing (the gradient of an all-gather).

    Returns:
        A new 1-D tensor of ``C`` elements, spread over the tiles holding ``t``.

    Raises:
        CollectiveError, GroupingError: as :func:`all_reduce`.
    """
    op = as_operator(op)
    rg, direction = _prepare(graph, t, prog, group, options, "reduce_scatter")
    check_operator(op, t, "reduce_scatter")
    prefix = name or "reduceScatter"
    n, G = t.num_elements, rg.group_size
    b = _builder(graph, rg, t, -(-n // G), prefix, direction)
    work = b.layout.work(graph, t.dtype, f"{prefix}/work")
    b.to_work(t.flatten(), work, "toWork")
    out, _ = _reduce_scatter_steps(b, work, op)
    b.flush(prog)
    return out


def all_gather(
    graph: poplar.Graph,
    t: poplar.Tensor,
    prog: poplar.Sequence,
    group: Group = None,
    name: str = "",
    options: dict[str, Any] | None = None,
) -> poplar.Tensor:
    """Gather ``t`` from every member of each group (ring all-gather).

    Returns:
        A new tensor ``[G, *t.shape]``: row ``k`` is the value of the member of index
        ``k``; each row is mapped like ``t``.

    Raises:
        CollectiveError, GroupingError: as :func:`all_reduce`.
    """
    rg, direction = _prepare(graph, t, prog, group, options, "all_gather")
    prefix = name or "allGather"
    G, tiles = rg.group_size, graph.tiles_of(t)
    out = graph.add_variable(t.dtype, (G, *t.shape), f"{prefix}/result")
    graph.set_tile_mapping(out, np.broadcast_to(tiles, out.shape))
    if t.num_elements == 0:
        return out
    b = _builder(graph, rg, t, t.num_elements, prefix, direction)
    work = b.layout.work(graph, t.dtype, f"{prefix}/work")
    mine = b.layout.chunk(graph, t.dtype, f"{prefix}/sent")
    spare = b.layout.chunk(graph, t.dtype, f"{prefix}/received")
    b.copy(t.flatten(), mine, "toSend")
    _all_gather_steps(b, work, mine, spare)
    b.copy(b.layout.chunks(work), out.reshape((G, t.num_elements)), "fromWork")
    b.flush(prog)
    return out


def all_to_all(
    graph: poplar.Graph,
    t: poplar.Tensor,
    prog: poplar.Sequence,
    group: Group = None,
    name: str = "",
    options: dict[str, Any] | None = None,
) -> poplar.Tensor:
    """Exchange rows between the members of each group: ``t`` is ``[G, ...]``; row ``j``
    of the member of index ``k`` becomes row ``k`` of the member of index ``j``.

    Returns:
        A new tensor shaped and mapped like ``t``.

    Raises:
        CollectiveError: ``t``'s leading dimension is not the group size; and as
            :func:`all_reduce`.
    """
    rg, direction = _prepare(graph, t, prog, group, options, "all_to_all")
    G = rg.group_size
    if t.rank == 0 or t.shape[0] != G:
        raise CollectiveError(
            f"all_to_all: {t!r} of shape {t.shape} needs a leading dimension equal to the "
            f"group size {G}"
        )
    prefix = name or "allToAll"
    out = util.create_output(graph, t.dtype, t.shape, f"{prefix}/result", like=t)
    m = t.num_elements // G
    if m == 0:
        return out
    b = _builder(graph, rg, t, m, prefix, direction)
    send = b.layout.work(graph, t.dtype, f"{prefix}/send")
    recv = b.layout.work(graph, t.dtype, f"{prefix}/receive")
    mine = b.layout.chunk(graph, t.dtype, f"{prefix}/sent")
    spare = b.layout.chunk(graph, t.dtype, f"{prefix}/received")
    local = CollectiveOperator.LOCAL
    b.to_work(t.flatten(), send, "toWork")
    b.select(send, mine, local, 0, "own/select")
    b.place(recv, mine, 0, "own/place")
    for s in range(1, G):
        b.select(send, mine, local, s, f"select{s}")
        b.cross(mine, spare, s, f"send{s}")
        b.place(recv, spare, -s, f"place{s}")
    b.from_work(recv, out.flatten(), "fromWork")
    b.flush(prog)
    return out


def broadcast(
    graph: poplar.Graph,
    t: poplar.Tensor,
    prog: poplar.Sequence,
    root: int = 0,
    group: Group = None,
    name: str = "",
    options: dict[str, Any] | None = None,
) -> poplar.Tensor:
    """Every member of each group gets the value of ``t`` on the member of index ``root``
    (a binomial tree: ``ceil(log2 G)`` steps, each one ``CrossReplicaCopy``).

    Returns:
        A new tensor shaped and mapped like ``t``.

    Raises:
        CollectiveError: ``root`` is not an index in the group; and as :func:`all_reduce`.
    """
    rg, _ = _prepare(graph, t, prog, group, options, "broadcast")
    G = rg.group_size
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < G:
        raise CollectiveError(f"broadcast: root {root!r} must be an index in 0..{G - 1}")
    prefix = name or "broadcast"
    out = util.create_output(graph, t.dtype, t.shape, f"{prefix}/result", like=t)
    if t.num_elements == 0:
        return out
    prog.add(poplar.Copy(t, out, name=f"{prefix}/local"))
    m, pos = rg.group_matrix, np.arange(G)
    dist = 1
    while dist < G:
        rel = (pos - int(root)) % G
        senders = pos[(rel < dist) & (rel + dist < G)]
        src, dst = m[:, senders].reshape(-1), m[:, (senders + dist) % G].reshape(-1)
        mapping = dict(zip(src.tolist(), dst.tolist()))
        prog.add(poplar.CrossReplicaCopy(out, out, mapping, name=f"{prefix}/step{dist}"))
        dist *= 2
    return out
