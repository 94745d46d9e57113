"""Lowering of ``LinearLayout`` (``linear_layout.py``), as the C++ opx grows it: a new
variable of the input's type and shape, mapped by ``poputil::mapTensorLinearly`` with the
op's ``bs`` as the grain, and one ``Copy`` from the input (its cost: the copy's exchange
and on-tile moves). The variable is named ``<op>/new_layout``.
"""

from __future__ import annotations

from typing import Any

from tremula import poplar
from tremula.popxl.custom_ops.linear_layout import OP


def relayout(
    graph: poplar.Graph, t: poplar.Tensor, bs: int, prog: poplar.Sequence, name: str
) -> poplar.Tensor:
    """A copy of ``t`` mapped linearly with grain ``bs``."""
    out = graph.add_variable(t.dtype, t.shape, f"{name}/new_layout")
    poplar.map_tensor_linearly(graph, out, 0, bs)
    prog.add(poplar.Copy(t, out, name=f"{name}/copy"))
    return out


def _lower(lw: Any, op: Any, env: Any, prog: poplar.Sequence) -> None:
    env[op.outputs[0]] = relayout(lw.graph, env[op.inputs[0]], op.attrs["bs"], prog, op.debug_name)


#: op type -> lowering rule (``tremula/lowering/custom_ops.py`` registers them)
LOWERING_RULES = {OP: _lower}
