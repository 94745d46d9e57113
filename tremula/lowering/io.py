"""Lowering of ``popxl/ops/io.py``: host streams and remote buffers become Poplar streams
and remote buffers; ``remote_code_load`` becomes a function-buffer load."""

from __future__ import annotations

import math
from typing import Any

from tremula import poplar
from tremula.lowering.driver import LOWERING_RULES, Env, Lowerer, naming, rule
from tremula.popxl.ops.base import OpNode
from tremula.popxl.ops.multi_exchange import exchange_parts


@rule("HostLoad")
def host_load(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    stream = op.attrs["stream"]
    fifo = lw.h2d.get(stream)
    if fifo is None:
        fifo = lw.graph.add_host_to_device_fifo(
            stream.tensor_id, stream.dtype.as_poplar(), max(1, math.prod(stream.shape))
        )
        lw.h2d[stream] = fifo
    t = env[op.inputs[0]] if op.inputs else lw.new_tensor(op.outputs[0])  # into the init tensor
    if t.num_elements:  # a zero-element tensor takes nothing from its stream
        flat = t.reshape((t.num_elements,)) if t.rank != 1 else t
        prog.add(poplar.Copy(fifo, flat, name=op.outputs[0].id))
    env[op.outputs[0]] = t


@rule("HostStore")
def host_store(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    stream = op.attrs["stream"]
    fifo = lw.d2h.get(stream)
    if fifo is None:
        fifo = lw.graph.add_device_to_host_fifo(
            stream.tensor_id, stream.dtype.as_poplar(), max(1, math.prod(stream.shape))
        )
        lw.d2h[stream] = fifo
    src = env[op.inputs[0]]
    if src.num_elements:  # a zero-element tensor gives its stream nothing
        prog.add(poplar.Copy(src.flatten(), fifo))


def _buffer(lw: Lowerer, buf: Any) -> poplar.RemoteBuffer:
    rb = lw.remote.get(buf)
    if rb is None:
        rb = lw.graph.add_remote_buffer(
            lw.name(f"remote{buf.remote_buffer_id}"),
            buf.tensor_dtype.as_poplar(),
            max(1, math.prod(buf.tensor_shape)),
            buf.entries,
        )
        lw.remote[buf] = rb
    return rb


def _offset(lw: Lowerer, op: OpNode, env: Env, index: int) -> int | poplar.Tensor:
    off = op.attrs["offset"]
    return off if off is not None else env[op.inputs[index]].flatten()


def _fresh(op: OpNode) -> bool:
    """Whether input 0 of ``op`` is an ``Init`` tensor that only ``op`` reads (and not a
    graph output): an out-of-place load may then load into it (PopART's inplacing)."""
    t = op.inputs[0]
    made = t.producer
    return (
        made is not None
        and made.type == "Init"
        and t not in op.graph.outputs
        and sum(u is t for other in op.graph.ops for u in other.inputs) == 1
    )


@rule("RemoteLoad", "RemoteLoadInplace")
def remote_load(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    """``RemoteLoadInplace`` loads into its input 0; ``RemoteLoad`` into a new tensor, or
    into its input 0 where that is a fresh ``Init`` tensor no one else reads (as
    ``remote_load`` makes it)."""
    rb = _buffer(lw, op.attrs["buffer"])
    src = env[op.inputs[0]]
    inplace = bool(op.definition.inplace_of) or _fresh(op)
    t = src if inplace else lw.new_tensor(op.outputs[0])
    offset = _offset(lw, op, env, 1)
    prog.add(poplar.Copy(rb, t.flatten(), offset))
    env[op.outputs[0]] = t


@rule("RemoteStore")
def remote_store(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    rb = _buffer(lw, op.attrs["buffer"])
    prog.add(poplar.Copy(env[op.inputs[0]].flatten(), rb, _offset(lw, op, env, 1)))


@rule("MultiExchange")
def multi_exchange(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    """Each merged exchange as the op it replaces, in order (the programs, and so results
    and cycles, are those of the exchanges unmerged)."""
    for part in exchange_parts(op):
        with naming([part]):
            LOWERING_RULES[part.type](lw, part, env, prog)


@rule("RemoteCodeLoad")
def remote_code_load(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    graph = op.attrs["graphs"][0]
    lowered = lw.subgraph(graph)
    if lowered.code_buffer is None:
        lowered.code_buffer = lw.graph.add_function_buffer(lowered.function)
    prog.add(poplar.Copy(lowered.code_buffer, lowered.function))
