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


def _groups(ops: list[OpNode]) -> list[list[OpNode]]:
    """The exchanges among ``ops`` (graph order) in groups that can each run as one op
    (see :func:`_place`): a group ends before an exchange that reads what depends on it,
    or writes what an op that must follow it reads."""
    groups: list[list[OpNode]] = []
    group: list[OpNode] = []
    tainted: set[Tensor] = set()  # what the group makes or writes, and what follows from it
    read: set[Tensor] = set()  # what the group's exchanges read
    later: set[Tensor] = set()  # what the ops that must follow the group read
    for op in ops:
        written = {op.inputs[k] for k in op.modified}
        if op.type in _MERGEABLE:
            if group and (
                _key(op) != _key(group[0]) or tainted.intersection(op.inputs) or written & later
            ):
                groups.append(group)
                group, tainted, read, later = [], set(), set(), set()
            group.append(op)
            tainted.update(op.outputs, written)
            read.update(op.inputs)
        elif group and _follows(op, written, tainted, read):
            tainted.update(op.outputs, written)
            later.update(op.inputs)
    return groups + ([group] if group else [])


def _follows(op: OpNode, written: set[Tensor], tainted: set[Tensor], read: set[Tensor]) -> bool:
    """Whether ``op`` must run after the merged exchanges: it reads what they make or write
    (or what follows from it), or writes what they read."""
    return bool(tainted.intersection(op.inputs) or written & read)


def _place(graph: Graph, group: list[OpNode]) -> OpNode:
    """Replace ``group`` in ``graph``'s ops by one ``MultiExchange`` op at the place of its
    last exchange; the ops in between that must follow the exchanges move after it."""
    ops = graph._ops
    members = {id(op) for op in group}
    first = next(i for i, op in enumerate(ops) if op is group[0])
    last = next(i for i, op in enumerate(ops) if op is group[-1])
    tainted: set[Tensor] = set()
    read: set[Tensor] = set()
    before: list[OpNode] = []
    after: list[OpNode] = []
    for op in ops[first : last + 1]:
        written = {op.inputs[k] for k in op.modified}
        if id(op) in members:
            tainted.update(op.outputs, written)
            read.update(op.inputs)
        elif _follows(op, written, tainted, read):
            after.append(op)
            tainted.update(op.outputs, written)
        else:
            before.append(op)
    multi = merged_exchange(group)
    ops[first : last + 1] = [*before, multi, *after]
    for hook in list(graph._hooks.values()):  # an outer merge_exchange merges it in turn
        hook(multi)
    return multi


def _merge(graph: Graph, created: list[OpNode]) -> list[OpNode]:
    """Merge the exchanges of ``created`` still in ``graph``; the ``MultiExchange`` ops."""
    made = {id(op) for op in created}  # the graph's ops: not those of refused (undone) calls
    ops = [op for op in graph._ops if id(op) in made]
    return [_place(graph, group) for group in _groups(ops)]


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
