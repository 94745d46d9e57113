"""Non-linearities: ``non_linearity``, ``non_linearity_in_place`` and
``non_linearity_input_gradient`` (PopLibs' ``popnn::nonLinearity*``).

Element-wise types run popnn's codelets (``popnn::NonLinearity1D<T,NL>`` in place, and
``popnn::NonLinearityGrad1D<T,NL>``), one worker vertex per context on each tile holding the
tensor, split with a grain of the vector width (``util.partition``). The out-of-place form
clones the input (same mapping), copies it and runs the in-place vertex, as PopLibs does.
The softmax types (``SOFTMAX``, ``SOFTMAX_STABLE``, ``LOG_SOFTMAX``) act along the last
dimension and are composed in ``softmax.py``.
"""

from __future__ import annotations

from typing import Any

from tremula import poplar
from tremula.libs import util
from tremula.libs.popnn.codelets import CODELETS, NonLinearity1D, NonLinearityGrad1D
from tremula.libs.popnn.common import PopnnError, check_float, check_like
from tremula.libs.popnn.nonlinearity_table import (
    ROW_WISE,
    NonLinearityType,
    as_nl_type,
)
from tremula.libs.popnn.softmax import (
    log_softmax,
    log_softmax_in_place,
    log_softmax_input_gradient,
    softmax,
    softmax_in_place,
    softmax_input_gradient,
)
from tremula.libs.popops.reduce import type_arg

NL = NonLinearityType


def _where(fn: str, nl: Any, name: str) -> str:
    label = nl.name if isinstance(nl, NonLinearityType) else repr(nl)
    return f"popnn.{fn}({label}{f', {name!r}' if name else ''})"


def non_linearity_in_place(
    graph: poplar.Graph,
    nl_type: NonLinearityType | str,
    t: poplar.Tensor,
    prog: poplar.Sequence,
    name: str = "",
) -> poplar.Tensor:
    """Apply a non-linearity to ``t`` in place (PopLibs' ``nonLinearityInPlace``).

    Args:
        graph: the graph.
        nl_type: a :class:`NonLinearityType` or its name.
        t: a mapped float or half tensor without aliased elements; the softmax types act
            along its last dimension.
        prog: the sequence the compute set is appended to.
        name: debug prefix of the compute set.

    Returns:
        ``t``.

    Raises:
        PopnnError: an unknown type, ``t`` not a mapped float/half tensor, or aliased.
    """
    where = _where("non_linearity_in_place", nl_type, name)
    nl = as_nl_type(nl_type, where)
    t = check_float(graph, t, "t", where)
    util.refuse_aliased(t, where, PopnnError, role="t")
    if nl in ROW_WISE:
        if nl is NL.LOG_SOFTMAX:
            return log_softmax_in_place(graph, t, prog, name)
        return softmax_in_place(graph, t, prog, nl is NL.SOFTMAX_STABLE, name)
    if t.num_elements == 0:
        return t
    util.ensure_codelets(graph, CODELETS)
    part = util.partition(graph, t, graph.target.vector_width(t.dtype.size))
    vtype = f"{NonLinearity1D.name}<{type_arg(t.dtype)},{nl.name}>"
    cs = graph.add_compute_set(f"{name or nl.name.lower()}/NonLinearity")
    graph.add_vertices(cs, vtype, {"data": part.segments(t)}, part.tiles)
    prog.add(poplar.Execute(cs))
    return t


def non_linearity(
    graph: poplar.Graph,
    nl_type: NonLinearityType | str,
    t: poplar.Tensor,
    prog: poplar.Sequence,
    name: str = "",
) -> poplar.Tensor:
    """Apply a non-linearity to ``t`` into a new tensor mapped like ``t`` (PopLibs'
    ``nonLinearity``). Arguments and errors as :func:`non_linearity_in_place` (``t`` may
    be any view here)."""
    where = _where("non_linearity", nl_type, name)
    nl = as_nl_type(nl_type, where)
    t = check_float(graph, t, "t", where)
    if nl in ROW_WISE:
        if nl is NL.LOG_SOFTMAX:
            return log_softmax(graph, t, prog, name)
        return softmax(graph, t, prog, nl is NL.SOFTMAX_STABLE, name)
    out = graph.clone(t, f"{name or nl.name.lower()}/out")
    if t.num_elements:
        prog.add(poplar.Copy(t, out))
    return non_linearity_in_place(graph, nl, out, prog, name)


def non_linearity_input_gradient(
    graph: poplar.Graph,
    nl_type: NonLinearityType | str,
    act: poplar.Tensor,
    out_grad: poplar.Tensor,
    prog: poplar.Sequence,
    name: str = "",
) -> poplar.Tensor:
    """The gradient at the input of a non-linearity (PopLibs' ``nonLinearityInputGradient``).

    Args:
        graph: the graph.
        nl_type: a :class:`NonLinearityType` or its name.
        act: the forward *output* for SIGMOID, RELU, TANH and the softmax types; the forward
            *input* for GELU, GELU_ERF, SWISH and HARD_SIGMOID (PopLibs' convention; see
            ``nonlinearity_table``).
        out_grad: the gradient at the output, shaped and typed like ``act``.
        prog: the sequence the programs are appended to.
        name: debug prefix.

    Returns:
        A new tensor mapped like ``out_grad`` (the softmax types: like their maps' output).

    Raises:
        PopnnError: an unknown type, operands not mapped float/half tensors, or
            ``out_grad`` not shaped and typed like ``act``.
    """
    where = _where("non_linearity_input_gradient", nl_type, name)
    nl = as_nl_type(nl_type, where)
    act = check_float(graph, act, "act", where)
    out_grad = check_float(graph, out_grad, "out_grad", where)
    check_like(out_grad, act, "out_grad", "act", where)
    if nl in ROW_WISE:
        if nl is NL.LOG_SOFTMAX:
            return log_softmax_input_gradient(graph, act, out_grad, prog, name)
        return softmax_input_gradient(graph, act, out_grad, prog, name)
    in_grad = graph.clone(out_grad, f"{name or nl.name.lower()}/inGrad")
    if in_grad.num_elements == 0:
        return in_grad
    util.ensure_codelets(graph, CODELETS)
    part = util.partition(graph, in_grad, graph.target.vector_width(act.dtype.size))
    vtype = f"{NonLinearityGrad1D.name}<{type_arg(act.dtype)},{nl.name}>"
    cs = graph.add_compute_set(f"{name or nl.name.lower()}/NonLinearityGrad")
    fields = {
        "outGrad": part.segments(out_grad),
        "act": part.segments(act),
        "inGrad": part.segments(in_grad),
    }
    graph.add_vertices(cs, vtype, fields, part.tiles)
    prog.add(poplar.Execute(cs))
    return in_grad
