"""Op records and the op table.

An op in a graph is an :class:`OpNode` record: its type, inputs, outputs and attributes. Each
op type is defined once, by an :class:`OpDefinition` in :data:`OPS`: its output rule (specs from
input specs and attributes), its NumPy reference, which inputs it modifies in place, how it
uses graphs, and its gradient rule (attached by ``transforms/grads``' registration,
:func:`attach_grad`). Lowering rules live in the layer above, ``tremula/lowering``, keyed by
the same type name (``tremula/popxl/OVERVIEW.md`` says why).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any, Literal

from tremula.errors import reworded
from tremula.popxl.context import get_current_context, get_current_graph
from tremula.popxl.tensor import Tensor, TensorSpec
from tremula.popxl.tensorlocation import ExecutionContext

if TYPE_CHECKING:
    from tremula.popxl.graph import Graph
    from tremula.popxl.transforms.grads.base import GradRule

Infer = Callable[[Sequence[TensorSpec], dict[str, Any]], list[TensorSpec]]

#: how an op uses the graphs in its ``attrs["graphs"]``: ``"call"`` runs its one graph
#: once (inputs and outputs matched in order, PopART's ``CallOp``), ``"loop"`` runs its one
#: (wrapper) graph repeatedly (``LoopOp``), ``"branch"`` runs one of its two graphs
#: (``IfOp``), ``"code_load"`` loads its graph's code and runs nothing; ``""``: no graphs
GraphUse = Literal["", "call", "loop", "branch", "code_load"]


@dataclass(eq=False)
class OpNode:
    """One op of a graph. ``create_op`` makes each as an instance of its type's class in
    PopXL's IR bindings (``tremula.popxl._ir``, PopART's ``popart._internal.ir.op``), which
    adds PopART's op methods to the record."""

    id: int
    type: str
    graph: Graph
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...] = ()
    attrs: dict[str, Any] = field(default_factory=dict)
    modified: tuple[int, ...] = ()  # indices of inputs written in place
    ipu: int | None = None  # None: made outside popxl.ipu (virtual IPU 0)
    tile_set: str = "compute"
    execution_context: ExecutionContext = ExecutionContext.Normal
    #: the op's debug name: its type under the name scope it was created in (the lowering
    #: names the op's Poplar tensors and compute sets after it)
    debug_name: str = ""
    #: ``file:line`` of the user's code that created the op (the first frame outside
    #: Tremula and its PopXL / PopART packages)
    created_at: str = "?"

    def describe(self) -> str:
        """The op for a message: type, debug name, outputs and where the user made it."""
        outputs = ", ".join(repr(t.id) for t in self.outputs) or "none"
        return f"{self.type} {self.debug_name!r} (output {outputs}; created at {self.created_at})"

    @property
    def settings_name(self) -> str:
        """The op's name (PopART's ``Op::Settings::name``, read by ``op.name()``): the name
        of the ``Settings`` it was made with through the IR bindings; else the name PopXL's
        function that makes the op gives its settings (:attr:`OpDefinition.settings_name`),
        under the name scope it was created in (``"layer/matmul"``)."""
        if "name" in self.attrs:
            return str(self.attrs["name"])
        scope = self.debug_name.rpartition("/")[0]
        own = self.definition.settings_name
        return f"{scope}/{own}" if scope else own

    @property
    def called_graphs(self) -> tuple[Graph, ...]:
        return tuple(self.attrs.get("graphs", ()))

    @property
    def definition(self) -> OpDefinition:
        """The definition of the op's type (:data:`OPS`)."""
        return OPS[self.type]

    def ipu_of(self, t: Tensor) -> int | None:
        """The virtual IPU of input or output ``t``: the op's, except for an op spanning
        IPUs (``attrs["ipus"]``: input ``i`` and output ``i`` on ``ipus[i]``, as PopART's
        introspection ids of the cross-IPU all-reduce), and an ``IpuCopy``, whose input is
        on its ``source`` IPU (the op sits on the destination's)."""
        if self.type == "IpuCopy" and any(x is t for x in self.inputs):
            return int(self.attrs["source"])
        ipus = self.attrs.get("ipus")
        if ipus is not None:
            for group in (self.outputs, self.inputs):
                for i, x in enumerate(group):
                    if x is t:
                        return int(ipus[i])
        return self.ipu

    def callee_output(self, t: Tensor) -> Tensor | None:
        """The called graph's output that output ``t`` of a ``Call`` or loop carries (a
        loop's graph has the condition as output 0), else None: PopART's ``SubgraphOp``
        finds the IPU and tile set of its outputs there (its output introspection)."""
        use = self.definition.graphs
        if use not in ("call", "loop") or not self.called_graphs:
            return None
        shift = 1 if use == "loop" else 0
        outs = self.called_graphs[0].outputs
        for j, x in enumerate(self.outputs):
            if x is t:
                return outs[j + shift] if j + shift < len(outs) else None
        return None

    def __repr__(self) -> str:
        return f"Op[{self.type} #{self.id} in {self.graph.name}]"


@dataclass(frozen=True)
class OpDefinition:
    """The definition of an op type.

    Its gradient fact is :attr:`differentiable` and :attr:`grad`, which cannot disagree: an op
    type is defined not differentiable (``defop(..., differentiable=False)``) or marked so by
    ``grads.not_differentiable``, else its rule is attached by ``@grads.grad`` (both through
    :func:`attach_grad`, which refuses a rule for an op that passes no gradient, and a second
    statement of either)."""

    type: str
    infer: Infer
    reference: Callable[..., Any] | None = None  # (input arrays, attrs) -> output arrays
    modifies: tuple[int, ...] = ()  # inputs written in place
    #: the gradient rule has an effect of its own (a host embedding's table update): autodiff
    #: runs it whenever a gradient reaches the op's outputs, whatever ``grads_required`` names
    grad_side_effect: bool = False
    #: how the op uses the graphs it names (:data:`GraphUse`)
    graphs: GraphUse = ""
    #: for an in-place form, the out-of-place op type it is the in-place form of
    inplace_of: str = ""
    #: output 0 is a view of the inputs: nothing is written, but writes to the output reach
    #: them (``reshape_``, ``concat_``, ``detach_``)
    view: bool = False
    #: inputs that must be float16 / float32 when the op is lowered (Poplar's operations take
    #: no other type); PopART's ops take any dtype when made, so the check is the lowering's
    #: (:meth:`check_lowerable_dtypes`), and a program may build such an op it never runs
    float_inputs: tuple[int, ...] = ()
    #: the name of the op's output where the program gives none (PopXL's
    #: ``g._create_tensor_id("<op>_out")``; :func:`defop` says how it is chosen); an op
    #: with several outputs names output ``k`` ``<out>_<k>``
    out: str = ""
    #: registration's slots (:func:`attach_grad`); read through :attr:`differentiable` and
    #: :attr:`grad`, which load the gradient rules first
    _passes_grad: bool = field(default=True, compare=False, repr=False)
    _grad: GradRule | None = field(default=None, init=False, compare=False, repr=False)

    @property
    def differentiable(self) -> bool:
        """Gradients flow through the op (it has a rule, or lacks one, which autodiff reports
        and a completeness test refuses). An in-place form's is its out-of-place op's."""
        _load_gradient_rules()
        return self._gradient_owner._passes_grad

    @property
    def grad(self) -> GradRule | None:
        """The op's gradient rule (``transforms/grads``), None if it is not differentiable
        or has none. An in-place form's is its out-of-place op's."""
        _load_gradient_rules()
        return self._gradient_owner._grad

    @property
    def _gradient_owner(self) -> OpDefinition:
        return OPS[self.inplace_of] if self.inplace_of else self

    def check_lowerable_dtypes(self, op: OpNode) -> None:
        """Refuse an op whose :attr:`float_inputs` are not float16 / float32.

        Raises:
            TypeError: naming the op, the input and its dtype.
        """
        for i in self.float_inputs:
            t = op.inputs[i] if i < len(op.inputs) else None
            if t is not None and t.dtype.name not in ("float16", "float32"):
                raise TypeError(
                    f"{self.type}: input {i} {t.id!r} must be float16 or float32, got {t.dtype}"
                )

    def output_name(self, k: int, count: int) -> str:
        """The name of output ``k`` of ``count`` where the program gives none, before
        ``Graph._create_tensor_id`` scopes it and makes it unique."""
        return self.out if count == 1 else f"{self.out}_{k}"

    @property
    def settings_name(self) -> str:
        """The name PopXL's function that makes the op gives its settings
        (``ctx._get_op_settings("add")``): its output's name without ``_out`` (``add``,
        ``relu_inplace``, ``matmul``)."""
        return self.out.removesuffix("_out")

    @property
    def runs_graphs(self) -> bool:
        """The op runs the graphs it names (a call, loop or branch; not a code load)."""
        return self.graphs in ("call", "loop", "branch")

    @property
    def outplace(self) -> str:
        """The out-of-place op type of this one (itself if it is not an in-place form)."""
        return self.inplace_of or self.type


OPS: dict[str, OpDefinition] = {}
#: out-of-place op type -> its in-place form
INPLACE: dict[str, str] = {}


def _load_gradient_rules() -> None:
    """Import ``transforms/grads``, whose modules attach the rules of PopXL's ops, so a
    definition's gradient fact is complete when read (ops defined elsewhere, custom ops and
    the host embedding, attach theirs beside their definitions)."""
    import tremula.popxl.transforms.grads  # noqa: F401


def attach_grad(op_types: Sequence[str], rule: GradRule | None) -> None:
    """Attach a gradient rule to the definitions of ``op_types``, or with None mark them as
    passing no gradient (``grads.grad`` / ``grads.not_differentiable`` call this).

    Raises:
        ValueError: naming the op type, if it is not defined, is an in-place form (it
            shares its out-of-place op's rule), already has a rule or is already not
            differentiable (defined so, or marked), or is given a rule but is defined with
            ``differentiable=False``. Nothing is attached then.
    """
    for i, op_type in enumerate(op_types):
        refusal = _grad_refusal(op_type, rule)
        if refusal is None and op_type in op_types[:i]:
            refusal = f"op type {op_type!r} is named twice"
        if refusal is not None:
            raise ValueError(refusal)
    for op_type in op_types:
        if rule is None:
            object.__setattr__(OPS[op_type], "_passes_grad", False)
        else:
            object.__setattr__(OPS[op_type], "_grad", rule)


def _name(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _grad_refusal(op_type: str, rule: GradRule | None) -> str | None:
    """Why ``rule`` (None: "not differentiable") cannot be attached to ``op_type``."""
    d = OPS.get(op_type)
    if d is None:
        return f"gradient rule for op type {op_type!r}, which no defop defines"
    if d.inplace_of:
        return (
            f"op type {op_type!r} is the in-place form of {d.inplace_of!r} and shares its "
            f"gradient fact: attach it to {d.inplace_of!r}"
        )
    if d._grad is not None:
        return f"op type {op_type!r} already has a gradient rule, {_name(d._grad)}"
    if not d._passes_grad:
        what = "a gradient rule" if rule is not None else "the mark 'not differentiable' again"
        return (
            f"op type {op_type!r} is already not differentiable (defop's differentiable=False "
            f"or grads.not_differentiable): it cannot be given {what}"
        )
    return None


def defop(
    op_type: str,
    infer: Infer,
    reference: Callable[..., Any] | None = None,
    modifies: tuple[int, ...] = (),
    differentiable: bool = True,
    grad_side_effect: bool = False,
    graphs: GraphUse = "",
    inplace_of: str = "",
    view: bool = False,
    float_inputs: tuple[int, ...] = (),
    out: str = "",
) -> OpDefinition:
    """Register an op type (once). An in-place form (``inplace_of``) is defined after its
    out-of-place op, modifies an input or is a view, and shares the out-of-place op's
    gradient fact (``differentiable`` must agree with it). The gradient rule is attached
    later (:func:`attach_grad`).

    ``out`` names the op's output as PopXL's function that makes the op does,
    ``<function>_out``; given empty, it is the op type in snake case (``IoTileCopy`` ->
    ``io_tile_copy_out``), for an in-place form ``<its op's name>_inplace_out``
    (``relu_inplace_out``, PopART's ``ReluInplaceOp``)."""
    if op_type in OPS:
        raise ValueError(f"op type {op_type!r} is already defined")
    if inplace_of:
        if inplace_of not in OPS:
            raise ValueError(f"{op_type}: its out-of-place op {inplace_of!r} is not defined")
        if inplace_of in INPLACE:
            raise ValueError(f"{inplace_of} already has an in-place form, {INPLACE[inplace_of]}")
        if not (modifies or view):
            raise ValueError(f"{op_type}: an in-place form modifies an input or is a view")
        if differentiable != OPS[inplace_of]._passes_grad:
            raise ValueError(
                f"{op_type}: differentiable={differentiable} contradicts its out-of-place op "
                f"{inplace_of!r}, whose gradient fact it shares"
            )
    if not out:
        of = OPS[inplace_of].out.removesuffix("_out") if inplace_of else ""
        out = f"{of}_inplace_out" if of else f"{_snake_case(op_type)}_out"
    d = OpDefinition(
        op_type, infer, reference, modifies, grad_side_effect, graphs, inplace_of, view,
        float_inputs, out, _passes_grad=differentiable,
    )  # fmt: skip
    OPS[op_type] = d
    if inplace_of:
        INPLACE[inplace_of] = op_type
    return d


def _snake_case(op_type: str) -> str:
    """``ReduceSum`` -> ``reduce_sum``, ``IoTileCopy`` -> ``io_tile_copy``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", op_type).lower()


def definplace(
    op_type: str, of: str, modifies: tuple[int, ...] = (), view: bool = False, out: str = ""
) -> OpDefinition:
    """Register ``op_type`` as the in-place form of ``of`` with ``of``'s output rule,
    reference and gradient fact: it writes the inputs ``modifies``, or its output is a
    ``view`` of them (``out``: as :func:`defop`'s)."""
    if of not in OPS:
        raise ValueError(f"{op_type}: its out-of-place op {of!r} is not defined")
    d = OPS[of]
    return defop(
        op_type,
        d.infer,
        d.reference,
        modifies=modifies,
        differentiable=d._passes_grad,
        grad_side_effect=d.grad_side_effect,
        graphs=d.graphs,
        inplace_of=of,
        view=view,
        float_inputs=d.float_inputs,
        out=out,
    )


_next_op_id = [0]

#: packages whose frames are not the user's code
_INTERNAL = ("tremula", "popxl", "popart", "popdist")


def user_site() -> str:
    """``file:line`` of the innermost caller outside Tremula's packages (``?`` if none)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.partition(".")[0] not in _INTERNAL:
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


def _foreign_input(op_type: str, i: int | str, t: Tensor, graph: Graph) -> str:
    """Why input ``i`` (an index, or the op function's argument name) of an op cannot be
    ``t``: it is in another Ir, or another graph. The message starts with PopXL's
    (``check_in_graph``: the argument's name, or the tensor's id where only the index is
    known), which programs match on."""
    arg = i if isinstance(i, str) else t.id
    popxl_words = f"The input tensor `{arg}` is not in the current Graph {graph.name}. "
    if t.graph.ir is not graph.ir:
        return popxl_words + (
            f"{op_type}: input {i} {t.id!r} belongs to another Ir (its graph "
            f"{t.graph.name!r} is not in the Ir of the current graph {graph.name!r}): a "
            f"tensor cannot cross Irs; make it in this Ir (popxl.variable / popxl.constant "
            f"with its data)"
        )
    return popxl_words + (
        f"{op_type}: input {i} {t.id!r} belongs to graph {t.graph.name!r}, not to the "
        f"current graph {graph.name!r}: pass it in as an input of the graph "
        f"(popxl.graph_input, or an argument of ir.create_graph)"
    )


def check_in_current_graph(what: str, **tensors: Any) -> None:
    """PopXL's ``check_in_graph`` for an op function's tensor arguments (by name), before
    the function adds anything: each tensor given must be of the current graph. Non-tensors
    are left to the caller.

    Raises:
        ValueError: ``The input tensor `<argument>` is not in the current Graph ...``, then
            which graph or Ir the tensor belongs to.
    """
    graph = get_current_graph()
    for arg, t in tensors.items():
        if isinstance(t, Tensor) and t.graph is not graph:
            raise ValueError(_foreign_input(what, arg, t, graph))


def create_op(
    op_type: str,
    inputs: Sequence[Tensor | None],
    attrs: dict[str, Any] | None = None,
    names: Sequence[str | None] | None = None,
    graph: Graph | None = None,
) -> tuple[Tensor, ...]:
    """Add an op of a defined type to the current graph and return its outputs. Inputs must
    belong to that graph, and still be in it (not undone by a refused call): ``ValueError``
    naming the tensor otherwise. Output ``k`` is named ``names[k]`` where given, else as
    the op's definition says (:meth:`OpDefinition.output_name`), through
    ``Graph._create_tensor_id``.

    An op that calls or loops a graph (whose outputs the graph gives) may have unconnected
    inputs (``None``), as PopXL's ``call_with_info(..., check_inputs=False)`` leaves them;
    they are connected later through the bindings, and a ``Session`` refuses the Ir while
    one is left unconnected."""
    d = OPS.get(op_type)
    if d is None:
        raise ValueError(f"unknown op type {op_type!r}")
    graph = get_current_graph() if graph is None else graph
    attrs = dict(attrs or {})
    for i, t in enumerate(inputs):
        if t is None and d.graphs in ("call", "loop", "branch"):
            continue
        if not isinstance(t, Tensor):
            raise TypeError(f"{op_type}: input {i} must be a Tensor, got {type(t).__name__}")
        if t.graph is not graph:
            raise ValueError(_foreign_input(op_type, i, t, graph))
        if graph._tensors.get(t.id) is not t:
            raise ValueError(
                f"{op_type}: input {i} {t.id!r} is no longer in graph {graph.name!r}: the "
                f"call that made it was refused and undone"
            )
    try:
        # (an unconnected input's spec is None: the rules of such ops read the graph)
        in_specs: list[Any] = [t.spec if t is not None else None for t in inputs]
        specs = d.infer(in_specs, attrs)
    except (TypeError, ValueError) as err:  # shape rules see specs: name the tensors here
        names = ", ".join(repr(t.id if t is not None else None) for t in inputs)
        where = f"op {op_type} in graph {graph.name!r}, inputs {names}"
        raise reworded(err, f"{err} ({where})") from None
    from tremula.popxl._ir.op.classes import op_class  # the binding class of the type

    ctx = get_current_context()
    op = op_class(op_type)(
        _next_op_id[0],
        op_type,
        graph,
        tuple(inputs),  # type: ignore[arg-type]  # unconnected slots are None, as edits make
        (),
        attrs,
        d.modifies,
        ctx.ipu,
        "io" if ctx.io_tiles else "compute",
        ctx.execution_context,
        f"{ctx.name_scope}/{op_type}" if ctx.name_scope else op_type,
        user_site(),
    )
    _next_op_id[0] += 1
    names = list(names or [])
    outputs = []
    for k, spec in enumerate(specs):
        name = names[k] if k < len(names) and names[k] else d.output_name(k, len(specs))
        t = Tensor._create(graph, graph._create_tensor_id(name), spec, op)
        graph._add_tensor(t)
        outputs.append(t)
    op.outputs = tuple(outputs)
    graph._add_op(op)
    return op.outputs
