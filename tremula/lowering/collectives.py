"""Lowering of ``popxl/ops/collectives``: each collective onto ``tremula.libs.gcl`` over the
op's group (``rg.grouping``, the framework-neutral grouping gcl takes). Output shapes other
than gcl's (all-gather's concat and meta-shape modes, replicated slices) are views of gcl's
result; the link traffic, external exchanges and their cycles are gcl's."""

from __future__ import annotations

import math

from tremula import poplar
from tremula.libs import gcl, util
from tremula.lowering.driver import Env, Lowerer, rule
from tremula.popxl.ops.base import OpNode
from tremula.popxl.ops.collectives.collectives import OPERATORS


def _group(op: OpNode) -> gcl.ReplicaGrouping:
    return op.attrs["group"].grouping


@rule(
    "ReplicatedAllReduce",
    "ReplicatedAllReduceInplace",
    "ReplicatedAllReduceStrided",
    "ReplicatedAllReduceTP",
)
def all_reduce(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    """gcl's all-reduce; with identical inputs a copy (PopART's OpToIdentity), no exchange."""
    t, out = env[op.inputs[0]], op.outputs[0]
    gop = OPERATORS[op.attrs["op"]]
    if op.attrs.get("identical_inputs"):
        env[out] = util.create_output(lw.graph, t.dtype, t.shape, lw.name(out.id), like=t)
        prog.add(poplar.Copy(t, env[out]))
    elif op.definition.inplace_of:
        gcl.all_reduce_in_place(lw.graph, t, gop, prog, _group(op), name=out.id)
        env[out] = t
    else:
        env[out] = gcl.all_reduce(lw.graph, t, gop, prog, _group(op), name=out.id)


@rule("ReplicatedReduceScatter", "ReplicatedReduceScatterStrided")
def reduce_scatter(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    gop = OPERATORS[op.attrs["op"]]
    out = op.outputs[0]
    env[out] = gcl.reduce_scatter(lw.graph, env[op.inputs[0]], gop, prog, _group(op), name=out.id)


@rule("ReplicatedAllGather", "ReplicatedAllGatherStrided")
def all_gather(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    out = op.outputs[0]
    gathered = gcl.all_gather(lw.graph, env[op.inputs[0]], prog, _group(op), name=out.id)
    mode = op.attrs["output_shape"]
    if mode == "meta_shape":
        view = gathered.flatten()[: math.prod(out.shape)].reshape(out.shape)
    elif mode == "concat":  # [G, *shape] -> shape with axis scaled by G, group-major
        view = gathered.dim_roll(0, op.attrs["axis"]).reshape(out.shape)
    else:
        view = gathered
    env[out] = view


@rule("ReplicatedSlice")
def replicated_slice(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    """Slice ``k`` along the axis for the member of index ``k``: the axis moved first and
    the whole taken as ``G`` equal chunks, each replica keeping its own (gcl's LOCAL
    reduce-scatter: no link traffic)."""
    t, axis, out = env[op.inputs[0]], op.attrs["axis"], op.outputs[0]
    front = t.dim_roll(axis, 0)
    chunk = gcl.reduce_scatter(
        lw.graph, front, gcl.CollectiveOperator.LOCAL, prog, _group(op), name=out.id
    )
    size = t.shape[axis] // _group(op).group_size
    env[out] = chunk.reshape((size, *front.shape[1:])).dim_roll(0, axis).reshape(out.shape)


@rule("AllReduce")
def all_reduce_across_ipus(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    """Within a replica: gcl's ring over the IPUs, each output mapped like its input (on
    its IPU); with identical inputs, a copy of each input (PopART's AllReduceToIdentity)."""
    ins = [env[t] for t in op.inputs]
    if op.attrs["identical_inputs"]:
        for t, out in zip(ins, op.outputs):
            graph = lw.replica_graph  # the outputs are on the inputs' IPUs
            env[out] = util.create_output(graph, t.dtype, t.shape, lw.name(out.id), like=t)
            prog.add(poplar.Copy(t, env[out]))
        return
    gop = OPERATORS[op.attrs["op"]]
    outs = gcl.all_reduce_within_replica(lw.replica_graph, ins, gop, prog, name=op.outputs[0].id)
    env.update(zip(op.outputs, outs))
