"""Softmax and log-softmax along the last dimension, and their input gradients, composed
from popops' reductions and element-wise maps as PopLibs composes them.

Stable forms subtract the row maximum before the exponential (PopLibs' ``SOFTMAX_STABLE``
and ``popnn::logSoftmax``); ``stable=False`` is PopLibs' plain ``SOFTMAX``
(``exp(x) / sum exp(x)``, which overflows for large logits as PopLibs' does). Every
function adds: a MAX reduction (stable forms), one fused map, an ADD reduction and one
fused map; the gradients one or two maps around one ADD reduction.
"""

from __future__ import annotations

from typing import Any

from tremula import poplar
from tremula.libs.popnn.common import PopnnError, check_float, check_like
from tremula.libs.popops.elementwise import map as pmap
from tremula.libs.popops.elementwise import map_in_place
from tremula.libs.popops.expr import Exp, Log, _1, _2, _3, _4
from tremula.libs.popops.reduce import Operation, reduce


def _check(graph: poplar.Graph, t: Any, where: str) -> poplar.Tensor:
    t = check_float(graph, t, "t", where)
    if t.num_elements == 0:
        raise PopnnError(f"{where}: t has no elements (shape {t.shape})")
    return t


def _row_reduce(
    graph: poplar.Graph, t: poplar.Tensor, op: Operation, prog: poplar.Sequence, name: str
) -> poplar.Tensor:
    """``op`` over the last dimension, expanded back to broadcast along it."""
    last = t.rank - 1
    return reduce(graph, t, [last], op, prog, name=name).expand([last])


def softmax(
    graph: poplar.Graph,
    t: poplar.Tensor,
    prog: poplar.Sequence,
    stable: bool = True,
    name: str = "",
) -> poplar.Tensor:
    """Softmax of ``t`` along its last dimension into a new tensor mapped like ``t``.

    Args:
        graph: the graph.
        t: float or half input of rank >= 1, mapped.
        prog: the sequence the programs are appended to.
        stable: subtract the row maximum first (PopLibs' ``SOFTMAX_STABLE``); else
            PopLibs' ``SOFTMAX``.
        name: debug prefix.

    Returns:
        The probabilities, shaped and typed like ``t``.

    Raises:
        PopnnError: ``t`` not a mapped float/half tensor, or empty.
    """
    where = f"popnn.softmax{f' {name!r}' if name else ''}"
    t = _check(graph, t, where)
    name = name or ("SoftmaxStable" if stable else "Softmax")
    if stable:
        mx = _row_reduce(graph, t, Operation.MAX, prog, f"{name}/max")
        e = pmap(graph, Exp(_1 - _2), [t, mx], prog, name=f"{name}/exp")
    else:
        e = pmap(graph, Exp(_1), [t], prog, name=f"{name}/exp")
    s = _row_reduce(graph, e, Operation.ADD, prog, f"{name}/sum")
    return map_in_place(graph, _1 / _2, [e, s], prog, name=f"{name}/div")


def softmax_in_place(
    graph: poplar.Graph,
    t: poplar.Tensor,
    prog: poplar.Sequence,
    stable: bool = True,
    name: str = "",
) -> poplar.Tensor:
    """:func:`softmax` written into ``t`` (returned)."""
    where = f"popnn.softmax_in_place{f' {name!r}' if name else ''}"
    t = _check(graph, t, where)
    name = name or ("SoftmaxStable" if stable else "Softmax")
    if stable:
        mx = _row_reduce(graph, t, Operation.MAX, prog, f"{name}/max")
        map_in_place(graph, Exp(_1 - _2), [t, mx], prog, name=f"{name}/exp")
    else:
        map_in_place(graph, Exp(_1), [t], prog, name=f"{name}/exp")
    s = _row_reduce(graph, t, Operation.ADD, prog, f"{name}/sum")
    return map_in_place(graph, _1 / _2, [t, s], prog, name=f"{name}/div")


def log_softmax(
    graph: poplar.Graph, t: poplar.Tensor, prog: poplar.Sequence, name: str = ""
) -> poplar.Tensor:
    """Stable log-softmax along the last dimension, ``x - max - log(sum exp(x - max))``,
    into a new tensor mapped like ``t`` (PopLibs' ``popnn::logSoftmax``). Arguments and
    errors as :func:`softmax`."""
    where = f"popnn.log_softmax{f' {name!r}' if name else ''}"
    t = _check(graph, t, where)
    name = name or "LogSoftmax"
    mx = _row_reduce(graph, t, Operation.MAX, prog, f"{name}/max")
    e = pmap(graph, Exp(_1 - _2), [t, mx], prog, name=f"{name}/exp")
    s = _row_reduce(graph, e, Operation.ADD, prog, f"{name}/sum")
    return map_in_place(graph, _2 - _3 - Log(_4), [e, t, mx, s], prog, name=f"{name}/out")


def log_softmax_in_place(
    graph: poplar.Graph, t: poplar.Tensor, prog: poplar.Sequence, name: str = ""
) -> poplar.Tensor:
    """:func:`log_softmax` written into ``t`` (returned)."""
    where = f"popnn.log_softmax_in_place{f' {name!r}' if name else ''}"
    t = _check(graph, t, where)
    name = name or "LogSoftmax"
    mx = _row_reduce(graph, t, Operation.MAX, prog, f"{name}/max")
    e = pmap(graph, Exp(_1 - _2), [t, mx], prog, name=f"{name}/exp")
    s = _row_reduce(graph, e, Operation.ADD, prog, f"{name}/sum")
    return map_in_place(graph, _1 - _2 - Log(_3), [t, mx, s], prog, name=f"{name}/out")


def _check_grad(
    graph: poplar.Graph, out: Any, out_grad: Any, where: str
) -> tuple[poplar.Tensor, poplar.Tensor]:
    out = _check(graph, out, where)
    out_grad = check_float(graph, out_grad, "out_grad", where)
    check_like(out_grad, out, "out_grad", "out", where)
    return out, out_grad


def softmax_input_gradient(
    graph: poplar.Graph,
    out: poplar.Tensor,
    out_grad: poplar.Tensor,
    prog: poplar.Sequence,
    name: str = "",
) -> poplar.Tensor:
    """The gradient at the input of a softmax from its output ``y`` and the gradient
    ``g`` at the output: ``y * (g - sum(g * y))`` along the last dimension (PopLibs'
    ``nonLinearityInputGradient`` for the softmax types).

    Returns:
        A new tensor mapped like ``out * out_grad``'s first operand.

    Raises:
        PopnnError: non-float or unmapped operands, or ``out_grad`` not shaped and typed
            like ``out``.
    """
    where = f"popnn.softmax_input_gradient{f' {name!r}' if name else ''}"
    out, out_grad = _check_grad(graph, out, out_grad, where)
    name = name or "SoftmaxGrad"
    prod = pmap(graph, _1 * _2, [out, out_grad], prog, name=f"{name}/prod")
    s = _row_reduce(graph, prod, Operation.ADD, prog, f"{name}/sum")
    return map_in_place(graph, _2 * (_3 - _4), [prod, out, out_grad, s], prog, name=f"{name}/out")


def log_softmax_input_gradient(
    graph: poplar.Graph,
    out: poplar.Tensor,
    out_grad: poplar.Tensor,
    prog: poplar.Sequence,
    name: str = "",
) -> poplar.Tensor:
    """The gradient at the input of a log-softmax from its output ``y`` and the gradient
    ``g`` at the output: ``g - exp(y) * sum(g)`` along the last dimension. Arguments,
    result and errors as :func:`softmax_input_gradient`."""
    where = f"popnn.log_softmax_input_gradient{f' {name!r}' if name else ''}"
    out, out_grad = _check_grad(graph, out, out_grad, where)
    name = name or "LogSoftmaxGrad"
    s = _row_reduce(graph, out_grad, Operation.ADD, prog, f"{name}/sum")
    return pmap(graph, _2 - Exp(_1) * _3, [out, out_grad, s], prog, name=f"{name}/out")
