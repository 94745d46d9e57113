"""Gradient-rule registration and the helpers rules share.

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

A rule lives on its op's definition, ``OPS[op_type].grad``: ``@grad(op_type)`` attaches
it there (``ops.base.attach_grad``), and ``not_differentiable(op_type)`` marks an op type
gradients do not flow through (comparisons, piecewise-constant functions), as defining it
with ``differentiable=False`` does; registration refuses a second statement or a
contradiction. In-place forms share their out-of-place op's rule (``autodiff`` refuses a
rule that reads a value an in-place op has overwritten). :data:`GRADS` is a read-only view
of the definitions, by op type.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from tremula.popxl import ops
from tremula.popxl.ops.base import OPS, OpNode, attach_grad
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


class _GradTable(Mapping[str, GradRule | None]):
    """Op type -> its gradient rule, or None for "not differentiable", read from the
    definitions (``OpDefinition.grad``); a differentiable op type without a rule is absent."""

    def __getitem__(self, op_type: str) -> GradRule | None:
        d = OPS.get(op_type)
        if d is None or (d.differentiable and d.grad is None):
            raise KeyError(op_type)
        return d.grad

    def __iter__(self) -> Iterator[str]:
        return iter([t for t, d in OPS.items() if d.grad is not None or not d.differentiable])

    def __len__(self) -> int:
        return sum(1 for _ in self)


#: op type -> its gradient rule, or None for "not differentiable" (a view of :data:`OPS`)
GRADS: Mapping[str, GradRule | None] = _GradTable()


def grad(*op_types: str) -> Callable[[GradRule], GradRule]:
    """Register ``fn`` as the gradient rule of ``op_types`` (their in-place forms share it):
    it becomes their definitions' ``grad``. ``ValueError`` naming the op type if one is not
    defined, already has a rule or is not differentiable."""

    def register(fn: GradRule) -> GradRule:
        attach_grad(op_types, fn)
        return fn

    return register


def not_differentiable(*op_types: str) -> None:
    """Mark op types (and their in-place forms) as passing no gradient, where their
    definitions do not say so already (``ValueError`` naming the op type otherwise)."""
    attach_grad(op_types, None)


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
