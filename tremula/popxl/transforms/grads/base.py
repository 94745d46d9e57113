"""The gradient-rule table and the helpers rules share.

A rule builds the gradients of an op's inputs from the gradients of its outputs, with
ordinary PopXL ops, so the backward graph is PopXL IR that lowers like any other. It is
called with the grad graph as the current graph::

    rule(ctx, op, grads, need) -> one gradient (or None) per input of ``op``

``grads[k]`` is the gradient of ``op.outputs[k]`` (zeros, made when first read, if no
gradient reaches it); ``need[i]`` says whether the gradient of ``op.inputs[i]`` is wanted (a
rule skips the others and reads, with ``ctx.fwd``, what each gradient it makes needs, as
PopART's grad op for that input reads it: ``autodiff`` also runs the rule for every float
input to find what PopART's pruned grad ops would read). ``ctx.fwd(t)`` is a forward
tensor's value in the grad graph (the grad graph gains an input for it, and the forward
graph an output if needed); ``ctx.read(t)`` is that value only if the backward pass reads
``t`` already (else None: no input added); ``ctx.zeros(t)`` is a zero gradient for ``t``;
``ctx.grad_info(graph)`` differentiates a called graph.

``GRADS[op_type] is None`` marks an op type gradients do not flow through (comparisons,
piecewise-constant functions); an op type may also be defined with ``differentiable=False``.
In-place forms share their out-of-place rule (``autodiff`` refuses a rule that reads a value
an in-place op has overwritten).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from tremula.popxl import ops
from tremula.popxl.ops.base import INPLACE, OpNode
from tremula.popxl.tensor import Tensor

if TYPE_CHECKING:
    from tremula.popxl.graph import Graph
    from tremula.popxl.transforms.grad_info import GradGraphInfo

Grads = Sequence[Tensor | None]


class OutputGrads(Sequence[Tensor]):
    """The gradients of an op's outputs. One that no gradient reaches is zeros, made (by
    ``zeros``) when first read."""

    def __init__(
        self,
        grads: Sequence[Tensor | None],
        outputs: Sequence[Tensor],
        zeros: Callable[[Tensor], Tensor],
    ) -> None:
        self._grads = list(grads)
        self._outputs = outputs
        self._zeros = zeros

    def __getitem__(self, index: int) -> Tensor:  # type: ignore[override]
        g = self._grads[index]
        if g is None:
            g = self._grads[index] = self._zeros(self._outputs[index])
        return g

    def __len__(self) -> int:
        return len(self._grads)

    def provided(self, index: int) -> Tensor | None:
        """The gradient of output ``index`` if one reached it, else None (no zeros made)."""
        return self._grads[index]


class GradContext(Protocol):
    """What a rule may ask of the autodiff in progress."""

    def fwd(self, t: Tensor) -> Tensor: ...

    def read(self, t: Tensor) -> Tensor | None: ...

    def zeros(self, t: Tensor) -> Tensor: ...

    def grad_info(self, graph: Graph) -> GradGraphInfo: ...


GradRule = Callable[[GradContext, OpNode, OutputGrads, Sequence[bool]], Grads]

#: op type -> its gradient rule, or None for "not differentiable"
GRADS: dict[str, GradRule | None] = {}


def _forms(*op_types: str) -> tuple[str, ...]:
    """The op types and their in-place forms (``OpDefinition.inplace_of``) that exist."""
    return tuple(t for base in op_types for t in (base, INPLACE.get(base)) if t is not None)


def grad(*op_types: str) -> Callable[[GradRule], GradRule]:
    """Register ``fn`` as the gradient rule of ``op_types`` (and their in-place forms)."""

    def register(fn: GradRule) -> GradRule:
        for t in _forms(*op_types):
            if t in GRADS:
                raise ValueError(f"op type {t!r} already has a gradient rule")
            GRADS[t] = fn
        return fn

    return register


def not_differentiable(*op_types: str) -> None:
    """Mark op types (and their in-place forms) as passing no gradient."""
    for t in _forms(*op_types):
        if t in GRADS:
            raise ValueError(f"op type {t!r} already has a gradient rule")
        GRADS[t] = None


# ---- helpers ----


def reshape(t: Tensor, shape: Sequence[int]) -> Tensor:
    """``t`` with ``shape`` (``t`` itself, no copy, if it has that shape)."""
    return t if t.shape == tuple(shape) else ops.reshape(t, shape)


def sum_to(g: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Undo NumPy broadcasting: sum ``g`` down to ``shape``."""
    if g.shape == shape:
        return g
    lead = g.rank - len(shape)
    axes = [*range(lead)]
    axes += [lead + i for i, s in enumerate(shape) if s == 1 and g.shape[lead + i] != 1]
    return reshape(ops.sum(g, axes) if axes else g, shape)


def expand(g: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Broadcast ``g`` to ``shape`` (NumPy rules)."""
    if g.shape == shape:
        return g
    return ops.add(ops.init(shape, g.dtype, "expand"), g)


def to_last(t: Tensor, axis: int) -> Tensor:
    """``t`` with ``axis`` moved to the end."""
    if axis == t.rank - 1:
        return t
    return ops.transpose(t, (*(d for d in range(t.rank) if d != axis), axis))


def from_last(t: Tensor, axis: int) -> Tensor:
    """Undo :func:`to_last`: the last axis moved back to ``axis``."""
    if axis == t.rank - 1:
        return t
    perm = (*(d for d in range(t.rank) if d != axis), axis)
    return ops.transpose(t, tuple(int(i) for i in np.argsort(perm)))


def pick(need: Sequence[bool], *makers: Callable[[], Tensor | None]) -> list[Tensor | None]:
    """The gradients wanted, each made only if ``need`` says so."""
    return [make() if n else None for n, make in zip(need, makers)]


def as_float(mask: Tensor, like: Tensor) -> Tensor:
    """A bool mask as 0 / 1 of ``like``'s dtype."""
    return ops.cast(mask, like.dtype)
