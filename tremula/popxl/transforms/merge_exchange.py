"""``merge_exchange`` and ``io_tile_exchange``: contexts that group the host and remote
exchanges created inside them.

PopXL merges such exchanges into one ``MultiExchange`` op so that they overlap. Here each
exchange op created inside is annotated with the group it belongs to (``op.attrs
["exchange_group"]``); the ops themselves, and so the numbers, are unchanged.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager

from tremula.popxl.context import get_current_graph, in_sequence, io_tiles
from tremula.popxl.ops.base import Op

#: op types that move data between the device and host or remote memory
EXCHANGE_OPS = frozenset({"HostLoad", "HostStore", "RemoteLoadInplace", "RemoteStore"})

_GROUPS = itertools.count()


@contextmanager
def _created_ops() -> Iterator[list[Op]]:
    graph = get_current_graph()
    created: list[Op] = []
    handle = graph.register_op_created_hook(created.append)
    try:
        yield created
    finally:
        graph.remove_op_created_hook(handle)


@contextmanager
def merge_exchange() -> Iterator[None]:
    """Group the ``host_load`` / ``host_store`` / ``remote_load`` / ``remote_store`` ops
    created inside (in the current graph) into one exchange group."""
    with _created_ops() as created:
        yield
    group = next(_GROUPS)
    for op in created:
        if op.type in EXCHANGE_OPS:
            op.attrs["exchange_group"] = group


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
        alive = {id(op) for op in graph.ops}  # not the ops of calls refused (and undone)
        created = [op for op in created if id(op) in alive]
        others = [op for op in created if op.type not in EXCHANGE_OPS and op.type != "Init"]
        merged = int(any(op.type in EXCHANGE_OPS for op in created))
        if merged + len(others) > 1:
            graph.ir._truncate(mark)
            raise RuntimeError(
                f"More than one Op remained after `io_tile_exchange`: "
                f"{merged + len(others)} ops remain in graph "
                f"{graph.name!r} after merging the exchanges, expected 1; ops other than "
                f"host/remote loads and stores cannot overlap: {others} (the block was "
                f"undone)"
            )
