"""``autodiff``: build the grad graph of a graph from the per-op gradient rules in
:mod:`tremula.popxl.transforms.grads`.

The grad graph's inputs are the gradients of the forward tensors in ``grads_provided``
(default: the outputs), then the forward tensors the backward pass reads; its outputs are
the gradients of ``grads_required`` (default: the inputs).

Which forward tensors those are follows PopART's autodiff: it grows, for each op it
differentiates, the grad ops of every input (``Op::getGradOps``), connects the forward
values each grad op reads (its ``gradInputInfo``) as grad-graph inputs, and prunes the grad
ops whose gradients nobody wants, keeping the inputs. So a grad graph here reads what the
gradients of every float input of each differentiated op read, needed or not (``y = x c``
with only ``x`` required reads ``c`` and ``x``), and forward constants are inputs like any
other forward value (a copy only where the forward graph cannot gain outputs).

Forward tensors the backward pass reads that are not inputs or outputs of the forward graph
become new outputs of it, and every existing call site of the forward graph gains the
matching outputs, so call sites made before and after ``autodiff`` both connect
(``GradGraphInfo.inputs_dict``). Calls inside the forward graph are differentiated
recursively, once per called graph. A failed ``autodiff`` leaves the Ir as it was.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Literal, overload

from tremula.errors import IRError, PopartException
from tremula.popxl import ops
from tremula.popxl.graph import Graph
from tremula.popxl.ops.base import OPS, OpNode, create_op
from tremula.popxl.tensor import Constant, Tensor, constant, graph_input, graph_output
from tremula.popxl.transforms.aliases import Aliases
from tremula.popxl.transforms.grad_info import (
    ExpectedConnection,
    ExpectedConnectionType,
    GradGraphInfo,
)
from tremula.popxl.transforms.grads import GradRule, OutputGrads

__all__ = ["ExpectedConnection", "ExpectedConnectionType", "GradGraphInfo", "autodiff"]

Fwd = ExpectedConnectionType.Fwd
FwdGrad = ExpectedConnectionType.FwdGrad
#: PopART's gradient tensor ids: ``Gradient___<forward tensor>`` (``getGradId``)
GRAD_PREFIX = "Gradient___"


@overload
def autodiff(
    graph: Graph,
    grads_provided: Iterable[Tensor] | None = None,
    grads_required: Iterable[Tensor] | None = None,
    called_graphs_grad_info: dict[Graph, GradGraphInfo] | None = None,
    return_all_grad_graphs: Literal[False] = False,
) -> GradGraphInfo: ...


@overload
def autodiff(
    graph: Graph,
    grads_provided: Iterable[Tensor] | None = None,
    grads_required: Iterable[Tensor] | None = None,
    called_graphs_grad_info: dict[Graph, GradGraphInfo] | None = None,
    *,
    return_all_grad_graphs: Literal[True],
) -> dict[Graph, GradGraphInfo]: ...


def autodiff(
    graph: Graph,
    grads_provided: Iterable[Tensor] | None = None,
    grads_required: Iterable[Tensor] | None = None,
    called_graphs_grad_info: dict[Graph, GradGraphInfo] | None = None,
    return_all_grad_graphs: bool = False,
) -> GradGraphInfo | dict[Graph, GradGraphInfo]:
    """Differentiate ``graph``.

    Args:
        graph: a subgraph (not the main graph).
        grads_provided: forward tensors whose gradients the grad graph takes as its first
            inputs, in this order (default: all outputs of ``graph``).
        grads_required: forward tensors whose gradients the grad graph returns, in this
            order (default: all inputs of ``graph``). A tensor no gradient reaches (an
            integer input, say) gets zeros.
        called_graphs_grad_info: grad infos to use for graphs called inside ``graph``;
            others are differentiated here.
        return_all_grad_graphs: return ``{graph: info}`` for ``graph`` and every called
            graph differentiated on the way.

    Returns:
        The :class:`GradGraphInfo` of ``graph`` (or the dict above).

    Raises:
        TypeError: ``graph`` is not a Graph, or a tensor argument is not a Tensor.
        ValueError: the main graph; tensors of another graph (``IRError``, also
            ``popart.popart_exception``, as PopART's lookup of their ids); a graph that
            modifies its inputs (``IRError``: "... contains a modifying op ..."); or a
            graph whose needed forward values cannot become outputs (one a loop op calls
            directly, as popxl-addons' ``repeat_graph`` makes; ``ops.repeat``'s graph is
            called by a Call and gains them).
        NotImplementedError: an op on the gradient path has no gradient rule.
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"autodiff: expected a Graph, got {type(graph).__name__}")
    if graph is graph.ir.main_graph:
        raise ValueError("autodiff: differentiate a subgraph (ir.create_graph), not the main graph")
    provided = _tensors(graph, grads_provided, graph.outputs, "grads_provided")
    required = _tensors(graph, grads_required, graph.inputs, "grads_required")
    infos = dict(called_graphs_grad_info or {})
    created: dict[Graph, GradGraphInfo] = {}
    with graph.ir._undo_on_error(op_outputs=True):  # a refused autodiff adds nothing
        info = _Autodiff(graph, provided, required, infos, created).run()
    created[graph] = info
    return created if return_all_grad_graphs else info


def _tensors(
    graph: Graph, given: Iterable[Tensor] | None, default: tuple[Tensor, ...], what: str
) -> tuple[Tensor, ...]:
    ts = tuple(default if given is None else given)
    for t in ts:
        if not isinstance(t, Tensor):
            raise TypeError(f"autodiff: {what} must hold Tensors, got {type(t).__name__}")
        if t.graph is not graph:  # PopART's autodiff looks the id up in the graph
            raise IRError(
                f"No Ir::Tensor with TensorId '{t.id}' in Tensors::get(..): autodiff: "
                f"{what} tensor {t.id!r} belongs to graph {t.graph.name!r}, not to "
                f"{graph.name!r}"
            )
    if len(set(map(id, ts))) != len(ts):
        raise ValueError(f"autodiff: {what} names a tensor more than once: {list(ts)}")
    return ts


class _Autodiff:
    """One grad graph being built (the ``ctx`` of the gradient rules)."""

    def __init__(
        self,
        graph: Graph,
        provided: tuple[Tensor, ...],
        required: tuple[Tensor, ...],
        infos: dict[Graph, GradGraphInfo],
        created: dict[Graph, GradGraphInfo],
    ) -> None:
        self.fwd_graph = graph
        self.provided = provided
        self.required = required
        self.infos = infos
        self.created = created
        self.grad_graph = _new_grad_graph(graph)
        self.expected_inputs: list[ExpectedConnection] = []
        self.values: dict[Tensor, Tensor] = {}  # forward tensor -> its value in the grad graph
        self._probe: list[Tensor] | None = None  # what fwd() was asked for, in _reads
        self.grads: dict[Tensor, list[Tensor]] = {}  # forward tensor -> gradient contributions
        self.position = {id(op): i for i, op in enumerate(graph.ops)}
        self.aliases = Aliases(graph)
        self.modifications = [
            (i, op, op.inputs[k]) for i, op in enumerate(graph.ops) for k in op.modified
        ]

    # ---- the driver ----
    def run(self) -> GradGraphInfo:
        self._check_inputs_unmodified()
        with self.grad_graph:
            for t in self.provided:
                self.grads[t] = [graph_input(t.shape, t.dtype, f"{GRAD_PREFIX}{t.name}")]
                self.expected_inputs.append(ExpectedConnection(t, FwdGrad))
            relevant = self._depends_on_required()
            for op in reversed(self.fwd_graph.ops):
                self._backward(op, relevant)
            for t in self.required:
                total = self._total(t)
                graph_output(total if total is not None else self.zeros(t))
        expected_outputs = tuple(ExpectedConnection(t, FwdGrad) for t in self.required)
        return GradGraphInfo(
            self.grad_graph, self.fwd_graph, tuple(self.expected_inputs), expected_outputs
        )

    def _depends_on_required(self) -> set[Tensor]:
        """The tensors whose gradients the backward pass computes: those that depend on a
        required tensor, and those that lead to an op whose gradient has a side effect."""
        relevant = set(self.required)
        for op in self.fwd_graph.ops:
            if _side_effect(op) or any(t in relevant for t in op.inputs):
                relevant.update(op.outputs)
        return relevant

    def _rule(self, op: OpNode) -> GradRule | None:
        d = OPS.get(op.type)
        if d is not None and not d.differentiable:
            return None
        if d is not None and d.grad is not None:
            return d.grad
        raise NotImplementedError(
            f"autodiff: op type {op.type!r} ({op!r} in graph {self.fwd_graph.name!r}) has no "
            f"gradient rule; add one in tremula/popxl/transforms/grads/ or define the op "
            f"type with differentiable=False"
        )

    def _backward(self, op: OpNode, relevant: set[Tensor]) -> None:
        if not any(self.grads.get(t) for t in op.outputs):
            return
        need = [t in relevant and t.dtype.is_floating_point for t in op.inputs]
        if not any(need) and not _side_effect(op):  # a side effect is never pruned
            return
        rule = self._rule(op)
        if rule is None:
            return
        totals = [self._total(t) for t in op.outputs]
        every = [t.dtype.is_floating_point for t in op.inputs]
        if every != need and not op.called_graphs:
            for t in self._reads(rule, op, totals, every):
                self.fwd(t)
        results = rule(self, op, OutputGrads(totals, op.outputs, self.zeros), need)
        for t, g, wanted in zip(op.inputs, results, need):
            if not wanted or g is None:
                continue
            if g.shape != t.shape or g.dtype != t.dtype:
                raise RuntimeError(
                    f"autodiff: the gradient rule of {op.type!r} gave {g.dtype} {g.shape} "
                    f"for input {t.id!r} ({t.dtype} {t.shape}) of {op!r}"
                )
            self.grads.setdefault(t, []).append(g)

    def _reads(
        self, rule: GradRule, op: OpNode, totals: list[Tensor | None], every: list[bool]
    ) -> list[Tensor]:
        """The forward tensors the gradients of every float input of ``op`` read, in the
        order the rule reads them, less those the grad graph cannot read (overwritten in
        place later, or not exposable: the forward graph cannot gain outputs). PopART grows
        the grad op of each input and keeps what they read as grad-graph inputs after
        pruning the unwanted ones; here the rule is run for every input with stand-ins
        for the forward values, and what it built is undone. A rule that refuses one of
        those gradients (an input PopART has no grad op for) adds nothing.

        Ops that call graphs are not asked: their rule reads what the called graph's grad
        graph expects, itself made for every input, whatever ``need`` is."""
        mark = self.grad_graph._mark()
        values, self.values, self._probe = self.values, dict(self.values), []
        try:
            rule(self, op, OutputGrads(totals, op.outputs, self.zeros), every)
            reads = self._probe
        except (NotImplementedError, ValueError, PopartException):
            reads = []
        finally:
            self.grad_graph._truncate(mark)
            self.values, self._probe = values, None
        return [t for t in reads if self._readable(t)]

    def _readable(self, t: Tensor) -> bool:
        """Whether :meth:`fwd` can give ``t`` without refusing."""
        if t in self.values or isinstance(t, Constant):
            return True
        if self._overwriter(t) is not None:
            return False
        exposed = t in self.fwd_graph.inputs or t in self.fwd_graph.outputs
        return exposed or not self._fixed_outputs

    def _total(self, t: Tensor) -> Tensor | None:
        """The gradient of ``t``: its one contribution, or the sum of its contributions
        (all made by now) as one ``Sum`` op, in the order they were made. Either is the
        gradient tensor ``Gradient___<t>``: PopART's ``GradGrowerSumOp`` sums the
        contributions into that tensor, and its ``PreUniRepl`` pattern takes out a sum of
        one, its producer then making ``Gradient___<t>``; a contribution that is a tensor of
        the grad graph already named (a graph input, another tensor's gradient) keeps its
        name, as the pattern keeps such a sum."""
        parts = self.grads.get(t)
        if not parts:
            return None
        if len(parts) > 1:
            with self.grad_graph:
                (total,) = create_op("Sum", parts, names=[f"{GRAD_PREFIX}{t.name}"])
            self.grads[t] = [total]
        else:
            self._name_gradient(t, parts[0])
        return self.grads[t][0]

    def _name_gradient(self, t: Tensor, grad: Tensor) -> None:
        """Rename ``grad``, the one contribution to ``t``'s gradient, ``Gradient___<t>``
        where it is an op output of the grad graph not named so yet (see :meth:`_total`)."""
        g = self.grad_graph
        tensor_id = f"{g.name}/{GRAD_PREFIX}{t.name}"
        if (
            grad.producer is None
            or grad.graph is not g
            or grad.name.startswith(GRAD_PREFIX)
            or grad in g.inputs
            or tensor_id in g._tensors
        ):
            return
        g._rename_tensor(grad, tensor_id)

    @functools.cached_property
    def _fixed_outputs(self) -> bool:
        """Whether a call site of the forward graph cannot gain outputs (see
        :func:`_expose`); autodiff adds no call site of it."""
        return any(_cannot_gain_outputs(op) for op in _call_sites(self.fwd_graph))

    # ---- what the rules ask for (GradContext) ----
    def fwd(self, t: Tensor) -> Tensor:
        """The value of forward tensor ``t`` in the grad graph: a grad-graph input expecting
        ``t`` (which becomes a forward output if needed). Constants too, as PopART passes
        them; a copy of a constant where the forward graph cannot gain outputs."""
        if t.graph is not self.fwd_graph:
            raise ValueError(f"autodiff: {t.id!r} is not a tensor of {self.fwd_graph.name!r}")
        value = self.values.get(t)
        if value is not None:
            return value
        exposed = t in self.fwd_graph.inputs or t in self.fwd_graph.outputs
        with self.grad_graph:
            if self._probe is not None:  # _reads: a stand-in, recorded
                self._probe.append(t)
                value = graph_input(t.shape, t.dtype, t.name)
            elif isinstance(t, Constant) and not exposed and self._fixed_outputs:
                value = constant(t.host_data, t.dtype, t.name)
            else:
                self._check_unmodified(t)
                value = graph_input(t.shape, t.dtype, t.name)
                self.expected_inputs.append(ExpectedConnection(t, Fwd))
                if not exposed:
                    _expose(self.fwd_graph, t)
        self.values[t] = value
        return value

    def read(self, t: Tensor) -> Tensor | None:
        """The value of forward tensor ``t`` in the grad graph if the backward pass reads it
        already (ops are differentiated last first, so every later op's gradient has
        read what it reads), else None; adds no input."""
        return self.values.get(t)

    def zeros(self, t: Tensor) -> Tensor:
        """A zero gradient for forward tensor ``t``."""
        with self.grad_graph:
            return ops.init(t.shape, t.dtype, f"{GRAD_PREFIX}{t.name}")

    def grad_info(self, graph: Graph) -> GradGraphInfo:
        """The grad info of a called graph: given by the caller, or made once here."""
        info = self.infos.get(graph)
        if info is None:
            if not graph._recursive_autodiff:
                raise IRError(
                    f"autodiff: {graph.name} has been marked as unsafe to autodiff "
                    f"recursively (setCanBeRecursivelyAutodiffed(False): it has a gradient "
                    f"graph of its own); pass its GradGraphInfo in called_graphs_grad_info"
                )
            info = _Autodiff(graph, graph.outputs, graph.inputs, self.infos, self.created).run()
            self.infos[graph] = info
            self.created[graph] = info
        return info

    # ---- modifications ----
    def _check_inputs_unmodified(self) -> None:
        for _, op, t in self.modifications:
            for x in self.fwd_graph.inputs:
                if self.aliases.same(t, x):
                    via = "" if t is x else f" (through {t.id!r})"
                    raise IRError(
                        f"The graph {self.fwd_graph.name} contains a modifying op {op.type} "
                        f"({op!r}) that modifies its input {x.id!r}{via}; autodiff cannot "
                        f"differentiate a graph that modifies its inputs (modify outside the "
                        f"graph, or use the out-of-place op)"
                    )

    def _overwriter(self, t: Tensor) -> OpNode | None:
        """An op after ``t``'s producer that overwrites ``t``, if one does."""
        made = self.position[id(t.producer)] if t.producer is not None else -1
        for i, op, m in self.modifications:
            if i > made and self.aliases.same(m, t):
                return op
        return None

    def _check_unmodified(self, t: Tensor) -> None:
        """The backward pass reads ``t``'s value at the end of the forward graph: refuse
        if an op after ``t``'s producer overwrites it."""
        op = self._overwriter(t)
        if op is not None:
            raise IRError(
                f"The graph {self.fwd_graph.name} contains a modifying op {op.type} "
                f"({op!r}) that overwrites {t.id!r}, whose value the backward pass "
                f"needs; use the out-of-place op"
            )


def _side_effect(op: OpNode) -> bool:
    """True when differentiating ``op`` has an effect of its own
    (``OpDefinition.grad_side_effect``), itself or through a graph it calls."""
    d = OPS.get(op.type)
    if d is not None and d.grad_side_effect:
        return True
    return any(_graph_side_effect(g) for g in op.called_graphs)


def _graph_side_effect(graph: Graph) -> bool:
    return any(_side_effect(op) for op in graph.ops)


def _new_grad_graph(graph: Graph) -> Graph:
    names = {g.name for g in graph.ir.graphs}
    name, n = f"{graph.name}_grad", 0
    while name in names:
        n += 1
        name = f"{graph.name}_grad_{n}"
    return graph.ir._new_graph(name)


def _call_sites(graph: Graph) -> list[OpNode]:
    return [
        op
        for g in graph.ir.graphs
        for op in g.ops
        if any(called is graph for called in op.called_graphs)
    ]


def _cannot_gain_outputs(op: OpNode) -> bool:
    """A call site that cannot gain outputs: a loop's (it carries its outputs). The call in
    a repeat's wrapper can, as PopART's stitcher adds outputs to every ``CallOp`` calling
    the forward graph: the new output stays in the wrapper, which carries only the outputs
    it had (``loop_plan``), so a repeated graph is differentiated like any other."""
    return op.definition.graphs not in ("call", "branch", "code_load")


def _expose(graph: Graph, t: Tensor, paired: set[int] | None = None) -> None:
    """Make ``t`` an output of ``graph``; every call site of ``graph`` gains the output. A
    conditional's other branch gains a zero output of the same spec (branches' outputs
    match), and its call sites in turn (``paired``: the conditionals already extended)."""
    sites = _call_sites(graph)
    for op in sites:
        if _cannot_gain_outputs(op):
            raise ValueError(
                f"autodiff: the backward pass needs {t.id!r}, so it must become an output "
                f"of {graph.name!r}; but {graph.name!r} is called by {op!r} in "
                f"{op.graph.name!r}, which cannot gain outputs"
            )
    paired = set() if paired is None else paired
    new_ifs = [op for op in sites if op.definition.graphs == "branch" and id(op) not in paired]
    paired.update(id(op) for op in new_ifs)
    graph._add_output(t)
    for op in sites:
        if op.definition.graphs == "call" or op in new_ifs:
            out = Tensor._create(op.graph, op.graph._unique_id(t.name), t.spec, op)
            op.graph._add_tensor(out)
            op.outputs = (*op.outputs, out)
    for op in new_ifs:
        for sibling in op.called_graphs:
            if sibling is not graph:
                with sibling:
                    unused = ops.init(t.shape, t.dtype, f"unused_{t.name}")
                _expose(sibling, unused, paired)
