"""Refusing an Ir too big for its device from the sizes of its tensors alone, before it is
lowered (lowering allocates host tables per element, which for a tensor of billions of
elements would exhaust the host long before the engine's memory check could run).

Two lower bounds, each enough to prove the program cannot fit however it is mapped and
scheduled: the largest tensor on the device must fit in the memory of a replica's tiles on its
own, and so must the variables and constants together (they are always live). Remote
variables live in streaming memory and do not count. Under the engine option
``debug.allowOutOfMemory`` only the first bound applies (the engine then reports what
overflows).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from tremula.errors import OutOfMemoryError, format_bytes
from tremula.popxl.ir import Ir
from tremula.popxl.tensor import Constant, Tensor, Variable
from tremula.target import Target

#: How many of the largest tensors a refusal names.
NAMED = 5


def _device_tensors(ir: Ir) -> Iterator[tuple[Tensor, int]]:
    """Every tensor that occupies device memory, with its bytes on one replica."""
    for graph in ir.graphs:
        if graph._loop_wrapper:  # a loop's wrapper only routes tensors: nothing on the device
            continue
        for t in graph.tensors:
            if isinstance(t, Variable) and t.remote is not None:
                continue
            yield t, t.nelms * t.dtype._itemsize


def _describe(t: Tensor, nbytes: int) -> str:
    kind = type(t).__name__.lower() if isinstance(t, Variable | Constant) else "tensor"
    return (
        f"{t.id!r} ({kind} {t.shape} {t.dtype.name}, {format_bytes(nbytes)}, in {t.graph.name!r})"
    )


def check_sizes(ir: Ir, target: Target, allow_out_of_memory: bool = False) -> None:
    """Refuse ``ir`` if its tensors' sizes alone prove it cannot fit on ``target``.

    Args:
        ir: The Ir about to be compiled.
        target: The target of one replica (the Poplar graph's target).
        allow_out_of_memory: The engine option ``debug.allowOutOfMemory``: check only that
            the largest tensor fits.

    Raises:
        OutOfMemoryError: Naming the largest tensors, what they need, what the target
            holds and how much every tile would hold even if they were spread evenly.
    """
    if target.is_cpu:
        return
    have = target.total_memory
    sized = list(_device_tensors(ir))
    largest = max(sized, key=lambda tn: tn[1], default=None)
    if largest is not None and largest[1] > have:
        _refuse(f"tensor {largest[0].id!r} alone needs", largest[1], target, sized)
    if allow_out_of_memory:
        return
    always = [(t, n) for t, n in sized if isinstance(t, Variable | Constant)]
    need = sum(n for _, n in always)
    if need > have:
        _refuse("its variables and constants (always live) need", need, target, always)


def _refuse(what: str, need: int, target: Target, tensors: Sequence[tuple[Tensor, int]]) -> None:
    top = sorted(tensors, key=lambda tn: -tn[1])[:NAMED]
    T = target.num_tiles
    raise OutOfMemoryError(
        f"Session: out of memory: the Ir cannot fit on the device: {what} "
        f"{format_bytes(need)} ({need:,} B) and a replica's {T:,} tiles x "
        f"{format_bytes(target.memory_bytes_per_tile)} hold {format_bytes(target.total_memory)}"
        f"; all {T:,} tiles would overflow, with at least {format_bytes(-(-need // T))} each "
        f"even spread evenly. Largest: "
        + "; ".join(_describe(t, n) for t, n in top)
        + ". Nothing was allocated. Shrink or split these tensors, keep variables in remote "
        "buffers (popxl.remote_variable), or use more IPUs."
    )
