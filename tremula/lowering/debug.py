"""Lowering of ``popxl/ops/debug.py``: each op copies its input into a new tensor;
``print_tensor`` adds a Poplar ``PrintTensor`` of the copy; ``ipu_copy`` copies onto the
destination IPU's tiles (the op is lowered on that IPU's virtual graph, see
``Lowerer.on_ipu``); ``io_tile_copy`` is a copy (IO tiles are not modelled)."""

from __future__ import annotations

from tremula import poplar
from tremula.lowering.driver import Env, Lowerer, rule
from tremula.popxl.ops.base import OpNode


@rule("PrintTensor")
def print_tensor(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    out = lw.new_tensor(op.outputs[0])
    prog.add(poplar.Copy(env[op.inputs[0]], out))
    if op.attrs["print_self"]:
        fmt = poplar.PrintTensorFmt(**op.attrs["format"])
        prog.add(poplar.PrintTensor(op.attrs["title"], out, name=op.outputs[0].id, fmt=fmt))
    env[op.outputs[0]] = out


@rule("IpuCopy")
def ipu_copy(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    out = lw.new_tensor(op.outputs[0])  # the op sits on the destination IPU's graph
    prog.add(poplar.Copy(env[op.inputs[0]], out))
    env[op.outputs[0]] = out


@rule("IoTileCopy")
def io_tile_copy(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    out = lw.new_tensor(op.outputs[0])
    prog.add(poplar.Copy(env[op.inputs[0]], out))
    env[op.outputs[0]] = out
