"""Lowering of ``popxl/ops/sparse.py``: the three passes of PopSparse's dynamic sparse
fully-connected layer (``tremula.libs.popsparse.dynamic``). The layer's weights are the
Poplar tensors of the ``meta_info`` and ``nz_values`` inputs (the variables' own tensors in
the main graph, the function's inputs in a subgraph), taken together as a ``SparseTensor``;
new host data in those variables is a new pattern for the same compiled program.

Those tensors were made by the lowering (mapped linearly); the rule maps them as
``create_fully_connected_weights`` maps the weights it creates (each bucket on its PN's tile,
the overflow info on the control tile), read off weights created in a scratch graph of the
same target, so that the passes find their buckets on their tiles.

The op records the plan its host data were partitioned with; the rule first checks that the
target being compiled for gives the same plan (else the buckets would be read with another
layout).
"""

from __future__ import annotations

import dataclasses
import functools
from types import ModuleType
from typing import TYPE_CHECKING, Any

from tremula import poplar
from tremula.errors import GraphError
from tremula.lowering.driver import Env, Lowerer, rule
from tremula.popxl.ops.base import OpNode
from tremula.popxl.tensor import Tensor, Variable
from tremula.target import Target

if TYPE_CHECKING:
    from tremula.libs.popsparse import dynamic


def _dynamic() -> ModuleType:
    """``popsparse.dynamic``, loaded with the first sparse layer lowered: a program without
    one never loads PopSparse (nor SciPy, its CSR kernel)."""
    from tremula.libs.popsparse import dynamic

    return dynamic


def _check_plan(lw: Lowerer, op: OpNode) -> None:
    """The plan on the graph's target must be the op's (the one its data were made for)."""
    a = op.attrs
    plan = a["plan"]
    here = _dynamic().get_plan(lw.graph.target, plan.input_type, a["params"], a["options"])
    if here != plan:
        t = lw.graph.target
        raise GraphError(
            f"lowering {op.type} {op.outputs[0].id!r}: its meta_info / nz_values were "
            f"partitioned for {plan.tiles_per_ipu} tiles per IPU ({plan.num_buckets} "
            f"buckets, partition {plan.partition.xyz}), but the Session compiles for "
            f"{t.tiles_per_ipu} tiles ({here.num_buckets} buckets, partition "
            f"{here.partition.xyz}); build the layer with device= the Session's device and "
            f"partition the pattern for it (ops.sparse.partitioner(..., device=...))"
        )


@functools.lru_cache(maxsize=64)
def _library_mapping(
    target: Target, params: dynamic.FullyConnectedParams, input_type: str, options: Any
) -> tuple[Any, Any]:
    """Tile mappings (Poplar's interval lists, one per tile of an IPU) of the meta-info and
    nz tensors that ``create_fully_connected_weights`` makes for this layer on ``target``."""
    scratch = poplar.Graph(dataclasses.replace(target, num_ipus=1))
    w = _dynamic().create_fully_connected_weights(scratch, input_type, params, options)
    return scratch.get_tile_mapping(w.meta_info), scratch.get_tile_mapping(w.nz_values)


def _made_here(t: Tensor) -> bool:
    """A tensor whose Poplar tensor the lowering made with a linear mapping: a main-graph
    variable or a subgraph input."""
    return (isinstance(t, Variable) and t.remote is None) or t in t.graph.inputs


def _map(lw: Lowerer, op: OpNode, env: Env, inputs: dict[int, int]) -> None:
    """Map the op's inputs ``{input index: 0 meta-info / 1 nz}`` the library's way."""
    a = op.attrs
    plan = a["plan"]
    mappings = _library_mapping(lw.graph.target, a["params"], plan.input_type, a["options"])
    for i, which in inputs.items():
        if _made_here(op.inputs[i]):
            lw.graph.set_tile_mapping(env[op.inputs[i]], mappings[which])


def _weights(lw: Lowerer, op: OpNode, env: Env, meta: int, nz: int) -> dynamic.SparseTensor:
    _map(lw, op, env, {meta: 0, nz: 1})
    return _dynamic().SparseTensor(env[op.inputs[meta]], env[op.inputs[nz]])


@rule("SparseFullyConnected")
def fully_connected(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    _check_plan(lw, op)
    a = op.attrs
    env[op.outputs[0]] = _dynamic().fully_connected_fwd(
        lw.graph, _weights(lw, op, env, 1, 2), env[op.inputs[0]], a["params"], prog,
        options=a["options"], name=op.outputs[0].id,
    )  # fmt: skip


@rule("SparseFullyConnectedGradA")
def fully_connected_grad_a(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    _check_plan(lw, op)
    a = op.attrs
    env[op.outputs[0]] = _dynamic().fully_connected_grad_a(
        lw.graph, _weights(lw, op, env, 1, 2), env[op.inputs[0]], a["params"], prog,
        options=a["options"], name=op.outputs[0].id,
    )  # fmt: skip


@rule("SparseFullyConnectedGradW")
def fully_connected_grad_w(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    _check_plan(lw, op)
    a = op.attrs
    _map(lw, op, env, {0: 0})
    meta, grad_out, x = (env[t] for t in op.inputs)
    env[op.outputs[0]] = _dynamic().fully_connected_sparse_grad_w(
        lw.graph, meta, grad_out, x, a["params"], prog, options=a["options"],
        name=op.outputs[0].id,
    )  # fmt: skip
