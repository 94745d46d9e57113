"""``merge_exchange`` and ``io_tile_exchange``: contexts that merge the host and remote
exchanges created inside them into one ``MultiExchange`` op (PopART's ``MultiExchangeOp``).

At the end of the context the ``HostLoad`` / ``HostStore`` / ``RemoteLoadInplace`` /
``RemoteStore`` ops created inside (and ``MultiExchange`` ops of inner contexts) are replaced
by one ``MultiExchange`` op whose inputs and outputs are theirs, in their order; their output
tensors keep their ids and are produced by it. Exchanges that cannot run as one (one reads
what another of them produces, or they are on different IPUs, tile sets or execution
contexts) are merged into consecutive ops instead. The op takes the place of the last
exchange it merges; ops created in between that read what it produces (or write what it
reads) move after it. Lowered, it does its exchanges in order: results are unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tremula.popxl.context import get_current_graph, in_sequence, io_tiles
from tremula.popxl.graph import Graph
from tremula.popxl.ops.base import OpNode
from tremula.popxl.ops.multi_exchange import EXCHANGE_OPS, merged_exchange
from tremula.popxl.tensor import Tensor

#: what merges: the exchange ops and merged exchanges
_MERGEABLE = EXCHANGE_OPS | {"MultiExchange"}


@contextmanager
def _created_ops() -> Iterator[list[OpNode]]:
    graph = get_current_graph()
    created: list[OpNode] = []
    handle = graph.register_op_created_hook(created.append)
    try:
        yield created
    finally:
        graph.remove_op_created_hook(handle)


def _key(op: OpNode) -> tuple[object, ...]:
    return op.ipu, op.tile_set, op.execution_context


def _befores(graph: Graph) -> dict[int, list[OpNode]]:
    """id(op) -> the ops it is constrained to follow (``in_sequence``, ``TopoCons``)."""
    out: dict[int, list[OpNode]] = {}
    for before, after in graph.topocons():
        out.setdefault(id(after), []).append(before)
    return out


def _groups(ops: list[OpNode], befores: dict[int, list[OpNode]]) -> list[list[OpNode]]:
    """The exchanges among ``ops`` (graph order) in groups that can each run as one op
    (see :func:`_place`): a group ends before an exchange that reads what depends on it,
    writes what an op that must follow it reads, or is constrained to follow such an op."""
    groups: list[list[OpNode]] = []
    group: list[OpNode] = []
    tainted: set[Tensor] = set()  # what the group makes or writes, and what follows from it
    read: set[Tensor] = set()  # what the group's exchanges read
    later: set[Tensor] = set()  # what the ops that must follow the group read
    members: set[int] = set()  # the group's exchanges
    following: set[int] = set()  # the other ops that must follow the group
    for op in ops:
        written = {op.inputs[k] for k in op.modified}
        after = {id(b) for b in befores.get(id(op), ())}
        if op.type in _MERGEABLE:
            if group and (
                _key(op) != _key(group[0])
                or tainted.intersection(op.inputs)
                or written & later
                or after & following
            ):
                groups.append(group)
                group, members, following = [], set(), set()
                tainted, read, later = set(), set(), set()
            group.append(op)
            members.add(id(op))
            tainted.update(op.outputs, written)
            read.update(op.inputs)
        elif group and _follows(op, written, tainted, read, after & (members | following)):
            tainted.update(op.outputs, written)
            later.update(op.inputs)
            following.add(id(op))
    return groups + ([group] if group else [])


def _follows(
    op: OpNode, written: set[Tensor], tainted: set[Tensor], read: set[Tensor], constrained: object
) -> bool:
    """Whether ``op`` must run after the merged exchanges: it reads what they make or write
    (or what follows from it), writes what they read, or is constrained to follow them or
    an op that follows them."""
    return bool(tainted.intersection(op.inputs) or written & read or constrained)


def _place(graph: Graph, group: list[OpNode], befores: dict[int, list[OpNode]]) -> OpNode:
    """Replace ``group`` in ``graph``'s ops by one ``MultiExchange`` op at the place of its
    last exchange; the ops in between that must follow the exchanges move after it. The
    constraints of the exchanges become the op's."""
    ops = graph._ops
    members = {id(op) for op in group}
    first = next(i for i, op in enumerate(ops) if op is group[0])
    last = next(i for i, op in enumerate(ops) if op is group[-1])
    tainted: set[Tensor] = set()
    read: set[Tensor] = set()
    before: list[OpNode] = []
    after: list[OpNode] = []
    following = set(members)
    for op in ops[first : last + 1]:
        written = {op.inputs[k] for k in op.modified}
        constrained = {id(b) for b in befores.get(id(op), ())} & following
        if id(op) in members:
            tainted.update(op.outputs, written)
            read.update(op.inputs)
        elif _follows(op, written, tainted, read, constrained):
            after.append(op)
            following.add(id(op))
            tainted.update(op.outputs, written)
        else:
            before.append(op)
    multi = merged_exchange(group)
    ops[first : last + 1] = [*before, multi, *after]
    graph._replace_ops(group, multi)
    for hook in list(graph._hooks.values()):  # an outer merge_exchange merges it in turn
        hook(multi)
    return multi


def _merge(graph: Graph, created: list[OpNode]) -> list[OpNode]:
    """Merge the exchanges of ``created`` still in ``graph``; the ``MultiExchange`` ops."""
    made = {id(op) for op in created}  # the graph's ops: not those of refused (undone) calls
    ops = [op for op in graph._ops if id(op) in made]
    befores = _befores(graph)
    placed = []
    for group in _groups(ops, befores):
        placed.append(_place(graph, group, befores))
        befores = _befores(graph)
    return placed


@contextmanager
def merge_exchange() -> Iterator[None]:
    """Merge the ``host_load`` / ``host_store`` / ``remote_load`` / ``remote_store`` ops
    created inside (in the current graph) into one ``MultiExchange`` op."""
    graph = get_current_graph()
    with _created_ops() as created:
        yield
    _merge(graph, created)


@contextmanager
def io_tile_exchange(verify_overlap: bool = True) -> Iterator[None]:
    """``io_tiles()`` + ``merge_exchange()`` + ``in_sequence(False)``.

    Raises:
        RuntimeError: with ``verify_overlap``, if the ops created inside do not merge into
            one (an op other than the exchanges and ``init`` was created inside). The
            block is then undone: what it added to the Ir is removed, and its tensors can
            no longer be used.
    """
    graph = get_current_graph()
    mark = graph.ir._mark()
    with _created_ops() as created, io_tiles(), merge_exchange(), in_sequence(False):
        yield
    if verify_overlap:
        alive = {id(op) for op in graph._ops}
        remain = [op for op in created if id(op) in alive and op.type != "Init"]
        if len(remain) > 1:
            graph.ir._truncate(mark)
            others = [op for op in remain if op.type != "MultiExchange"]
            raise RuntimeError(
                f"More than one Op remained after `io_tile_exchange`: {len(remain)} ops "
                f"remain in graph {graph.name!r} after merging the exchanges, expected 1; "
                f"ops other than host/remote loads and stores cannot overlap: {others} (the "
                f"block was undone)"
            )
