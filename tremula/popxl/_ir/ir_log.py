"""PopART's IR log (``Ir.logIr``): the IR serialised as PopART serialises it to JSON, one
entry per graph (``"maingraph"``, then each subgraph by id) listing its ops in schedule
order, each with its type, name (``Op.name()``), inputs and outputs (id, shape, data type)
and attributes.

Tremula's ops carry no ONNX domain or opset version, so an op's entry has none; attribute
values are written as strings, as PopART writes them (graphs by id, tensors and streams by
id, remote buffers by their id, dtypes by PopART's type names).
"""

from __future__ import annotations

import logging
from typing import Any

from tremula.popxl._ir.core.log import LOG
from tremula.popxl._ir.names import op_name
from tremula.popxl.graph import Graph
from tremula.popxl.ir import Ir
from tremula.popxl.ops.base import OpNode
from tremula.popxl.tensor import Tensor


def _tensor(t: Tensor | None) -> dict[str, str]:
    if t is None:  # a slot left disconnected by an edit through the bindings
        return {"name": "", "shape": "[]", "type": "UNDEFINED"}
    shape = "[" + " ".join(str(d) for d in t.shape) + "]"
    return {"name": t.id, "shape": shape, "type": t.dtype._popart}


def _value(v: Any) -> str:
    """An attribute value as PopART writes it: a string."""
    if isinstance(v, Graph):
        return v.name
    if isinstance(v, Tensor):
        return v.id
    if hasattr(v, "tensor_id"):  # a host stream
        return str(v.tensor_id)
    if hasattr(v, "remote_buffer_id"):
        return str(v.remote_buffer_id)
    if hasattr(v, "_popart"):  # a popxl dtype
        return str(v._popart)
    if isinstance(v, (list, tuple)):
        return "[" + " ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + " ".join(f"{k}:{_value(x)}" for k, x in v.items()) + "}"
    if hasattr(v, "name") and hasattr(v, "value"):  # an enum member
        return str(v.name)
    return str(v)


def op_entry(op: OpNode) -> dict[str, Any]:
    """One op of the log."""
    attrs = {k: _value(v) for k, v in sorted(op.attrs.items())}
    if op.ipu is not None:
        attrs["__ipu_number"] = str(op.ipu)
    if op.tile_set != "compute":
        attrs["__tile_set"] = op.tile_set
    return {
        "type": op_name(op.type).op_type,
        "name": op.settings_name,  # PopART's op->name()
        "inputs": [_tensor(t) for t in op.inputs],
        "outputs": [_tensor(t) for t in op.outputs],
        "attributes": attrs,
    }


def ir_json(ir: Ir) -> dict[str, list[dict[str, Any]]]:
    """The IR as PopART's JSON serialisation: graph id (``"maingraph"`` for the main
    graph) -> its ops in schedule order."""
    return {
        ("maingraph" if g is ir.main_graph else g.name): [op_entry(op) for op in g.ops]
        for g in ir.graphs
    }


def log_ir(ir: Ir) -> None:
    """Log the IR's JSON (what ``Ir.serialise`` gives) at INFO on PopART's ``ir`` logger
    (``popart.getLogger("ir")``)."""
    from tremula.popxl._ir.ir import ir_handle

    log = LOG.getChild("ir")
    if log.isEnabledFor(logging.INFO):
        log.info("%s", ir_handle(ir).serialise())
