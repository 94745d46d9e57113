"""Gradient rules of ``popxl/ops/var_updates``. PopART gives var updates no gradient; these
let a graph that accumulates into a tensor it returns (``t += f X``, ``t += f X^2``,
``t = X``) be differentiated. The other updates are defined not differentiable
(``differentiable=False`` in ``ops/var_updates``)."""

from __future__ import annotations

from collections.abc import Sequence

from tremula.popxl import ops
from tremula.popxl.ops.base import OpNode
from tremula.popxl.tensor import Tensor
from tremula.popxl.transforms.grads.base import (
    GradContext,
    Grads,
    OutputGrads,
    grad,
    sum_to,
)


@grad("CopyVarUpdate")
def _copy_var_update(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    return [None, g[0]]


def _like(g: Tensor, x: Tensor) -> Tensor:
    """``g`` summed to ``x``'s shape in ``x``'s dtype."""
    g = sum_to(g, x.shape)
    return g if g.dtype == x.dtype else ops.cast(g, x.dtype)


@grad("Accumulate")
def _accumulate(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """``t + X``, ``t + f X`` and ``t + f X^2``."""
    kind, slots = op.attrs["type"], op.attrs["slots"]
    if kind not in ("Add", "DampenedAdd", "DampenedAddSquare"):
        raise NotImplementedError(
            f"autodiff: {op!r} (accumulation type {kind}) has no gradient rule; only Add, "
            f"DampenedAdd and DampenedAddSquare accumulations are differentiable"
        )
    x = op.inputs[slots["X"]]
    f = op.inputs[slots["f"]] if "f" in slots else op.attrs["values"].get("f", 1.0)
    f_value = c.fwd(f) if isinstance(f, Tensor) else f
    grads: list[Tensor | None] = [None] * len(op.inputs)
    if need[0]:
        grads[0] = g[0]
    xv = c.fwd(x) if kind == "DampenedAddSquare" or "f" in slots else None
    if need[slots["X"]]:
        gx = g[0] * f_value if kind != "Add" else g[0]
        if kind == "DampenedAddSquare":
            assert xv is not None
            gx = gx * (ops.cast(xv, g[0].dtype) * 2.0)
        grads[slots["X"]] = _like(gx, x)
    if "f" in slots and need[slots["f"]]:
        assert xv is not None
        xt = ops.cast(xv, g[0].dtype) if xv.dtype != g[0].dtype else xv
        grads[slots["f"]] = _like(g[0] * (xt * xt if kind == "DampenedAddSquare" else xt), f)
    return grads
