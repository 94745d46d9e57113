"""Lowering of ``popxl/ops/debug.py``: each op copies its input into a new tensor;
``print_tensor`` adds a Poplar ``PrintTensor`` of the copy; ``ipu_copy`` maps the copy onto
the destination IPU's tiles when the device has that IPU (a replica here spans one IPU, so
usually it is an ordinary copy); ``io_tile_copy`` is a copy (IO tiles are not modelled)."""

from __future__ import annotations

from tremula import poplar
from tremula.lowering.context import Env, Lowerer, rule
from tremula.popxl.ops.base import Op


@rule("PrintTensor")
def print_tensor(lw: Lowerer, op: Op, env: Env, prog: poplar.Sequence) -> None:
    out = lw.new_tensor(op.outputs[0])
    prog.add(poplar.Copy(env[op.inputs[0]], out))
    if op.attrs["print_self"]:
        prog.add(poplar.PrintTensor(op.attrs["title"], out, name=op.outputs[0].id))
    env[op.outputs[0]] = out


@rule("IpuCopy")
def ipu_copy(lw: Lowerer, op: Op, env: Env, prog: poplar.Sequence) -> None:
    o, dest = op.outputs[0], op.attrs["destination"]
    g = lw.graph
    per = g.target.tiles_per_ipu
    out = g.add_variable(o.dtype.as_poplar(), o.shape, lw.name(o.id))
    place = g.get_ipu_graph(dest) if g.num_tiles // per > dest else g
    poplar.map_tensor_linearly(place, out, grain_size=g.target.vector_width(out.dtype.size))
    prog.add(poplar.Copy(env[op.inputs[0]], out))
    env[o] = out


@rule("IoTileCopy")
def io_tile_copy(lw: Lowerer, op: Op, env: Env, prog: poplar.Sequence) -> None:
    out = lw.new_tensor(op.outputs[0])
    prog.add(poplar.Copy(env[op.inputs[0]], out))
    env[op.outputs[0]] = out
