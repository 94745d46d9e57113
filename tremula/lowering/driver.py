"""The lowering driver: a PopXL Ir becomes a Poplar graph and one control program.

Each op type has one lowering rule (``LOWERING_RULES``, filled by the modules that mirror
``popxl/ops``, keyed by the type of a definition in ``popxl.ops.base.OPS``; the table stays
in this layer, which the IR does not know, see ``tremula/popxl/OVERVIEW.md``). A rule reads
the Poplar tensors of the op's inputs from the environment, appends programs, and binds its
outputs. The main graph lowers into the control program; a subgraph lowers once into a
Poplar function with its own input and output tensors, called from each call site with
copies in and out (pass-by-value).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tremula import poplar
from tremula.errors import TremulaError, reworded
from tremula.popxl.graph import Graph
from tremula.popxl.ops.base import OPS, OpNode
from tremula.popxl.tensor import Constant, Tensor, Variable
from tremula.popxl.tensorlocation import ExecutionContext

_NORMAL, _TO_HOST = ExecutionContext.Normal, ExecutionContext.WeightsToHostFragment
#: the main graph's programs, in the engine's order, and their names
FRAGMENTS = {
    _NORMAL: "main",
    ExecutionContext.WeightsFromHostFragment: "weights_from_host_fragment",
    _TO_HOST: "weights_to_host_fragment",
}
#: the order the programs run in on a device (weights written, runs, weights read)
ORDER = [ExecutionContext.WeightsFromHostFragment, _NORMAL, _TO_HOST]

Rule = Callable[["Lowerer", OpNode, "Env", poplar.Sequence], None]
LOWERING_RULES: dict[str, Rule] = {}


def rule(*op_types: str) -> Callable[[Rule], Rule]:
    """Register a lowering rule for op types (one rule per op family). ``ValueError``
    naming the op type, and nothing registered, if one is not defined (``defop``) or
    already has a rule."""

    def register(fn: Rule) -> Rule:
        for t in op_types:
            if t not in OPS:
                raise ValueError(f"lowering rule for op type {t!r}, which no defop defines")
            if t in LOWERING_RULES or op_types.count(t) > 1:
                raise ValueError(f"op type {t!r} already has a lowering rule")
        for t in op_types:
            LOWERING_RULES[t] = fn
        return fn

    return register


def rule_for(op_type: str) -> Rule | None:
    """The lowering rule of ``op_type``; the custom ops' rules (``custom_ops``, which
    imports every module of ``tremula/popxl/custom_ops``) are loaded the first time a type
    has none, so programs without custom ops never load them."""
    fn = LOWERING_RULES.get(op_type)
    if fn is None and op_type in OPS:
        import tremula.lowering.custom_ops  # noqa: F401  (registers the rules on import)

        fn = LOWERING_RULES.get(op_type)
    return fn


class Env(dict):
    """IR tensor -> Poplar tensor, for the graph being lowered."""

    def __missing__(self, t: Tensor) -> poplar.Tensor:
        raise KeyError(
            f"lowering: tensor {t.id!r} has no Poplar tensor yet (an op uses it "
            f"before it is produced?)"
        )


@contextmanager
def naming(ops: list[OpNode]) -> Iterator[None]:
    """Say which PopXL ops were being lowered when a library refused them: an error from
    below (a popops type check names ``IS_INF``, not ``ops.isinf``) is raised again, of the
    same type, prefixed with each op's type, debug name, outputs and the ``file:line`` of the
    user's code that created it (:meth:`OpNode.describe`)."""
    try:
        yield
    except (TremulaError, TypeError, ValueError, NotImplementedError) as err:
        where = "; ".join(op.describe() for op in ops)
        raise reworded(err, f"lowering op {where}: {err}") from None


@dataclass
class LoweredGraph:
    """A subgraph as a Poplar function with its input and output tensors."""

    function: poplar.Function
    inputs: list[poplar.Tensor]
    outputs: list[poplar.Tensor]
    code_buffer: poplar.FunctionBuffer | None = None


@dataclass
class VariableHandles:
    tensor: poplar.Tensor
    write: str
    read: str


@dataclass
class Lowerer:
    """Lowers one Ir onto a Poplar graph."""

    graph: poplar.Graph
    ir: Any
    variables: dict[Variable, VariableHandles] = field(default_factory=dict)
    functions: dict[Graph, LoweredGraph] = field(default_factory=dict)
    h2d: dict[Any, poplar.DataStream] = field(default_factory=dict)
    d2h: dict[Any, poplar.DataStream] = field(default_factory=dict)
    remote: dict[Any, poplar.RemoteBuffer] = field(default_factory=dict)
    code_loaded: set[Graph] = field(default_factory=set)
    #: context-manager factories the Session enters around every run (``hook(session)``):
    #: rules whose ops need host state during a run (host embeddings) check and connect it
    #: on entry, and undo a failed run's host effects on exit; added by rules, once each
    run_hooks: list[Callable[[Any], AbstractContextManager[Any]]] = field(default_factory=list)
    #: what rules defined above this layer keep for the program they lower (by their key)
    rule_state: dict[str, Any] = field(default_factory=dict)
    #: lower chains of element-wise ops as one expression (``fusion.py``); a class switch
    fuse_elementwise: ClassVar[bool] = True
    _names: dict[str, int] = field(default_factory=dict)
    _ipu_graphs: list[poplar.Graph] = field(default_factory=list)  # replica graph, IPUs
    _call_sites: dict[Graph, int] | None = None
    #: called with 1 after each op is lowered (a progress bar's ``update``), or None
    on_lowered: Callable[[int], Any] | None = None

    def __post_init__(self) -> None:
        self._ipu_graphs.append(self.graph)

    # ---- tensors ----
    def name(self, base: str) -> str:
        n = self._names.get(base, 0)
        self._names[base] = n + 1
        return base if n == 0 else f"{base}#{n}"

    def new_tensor(
        self,
        t: Tensor | None,
        dtype: poplar.Type | None = None,
        shape: tuple[int, ...] | None = None,
        name: str = "",
    ) -> poplar.Tensor:
        """A fresh Poplar variable for ``t`` (or the given type and shape), mapped linearly
        with a grain of the vector width."""
        dtype = dtype or t.dtype.as_poplar()  # type: ignore[union-attr]
        shape = t.shape if shape is None else shape  # type: ignore[union-attr]
        v = self.graph.add_variable(
            dtype, shape, self.name(name or (t.id if t is not None else "tmp"))
        )
        grain = self.graph.target.vector_width(dtype.size)
        poplar.map_tensor_linearly(self.graph, v, grain_size=grain)
        return v

    def constant(self, c: Constant) -> poplar.Tensor:
        dtype = c.dtype.as_poplar()
        v = self.graph.add_constant(dtype, c.shape, c.host_data, self.name(c.id))
        poplar.map_tensor_linearly(
            self.graph, v, grain_size=self.graph.target.vector_width(dtype.size)
        )
        return v

    def variable(self, v: Variable) -> poplar.Tensor:
        handles = self.variables.get(v)
        if handles is None:
            t = self.new_tensor(v, name=v.id)
            handles = VariableHandles(t, f"write/{v.id}", f"read/{v.id}")
            self.graph.create_host_write(handles.write, t)
            self.graph.create_host_read(handles.read, t)
            self.variables[v] = handles
        return handles.tensor

    def bind_leaves(self, graph: Graph, env: Env) -> None:
        """Variables (main graph) and constants of ``graph`` get their Poplar tensors."""
        for t in graph._tensors.values():  # creation order: the layout does not depend on ids
            with self.on_ipu(t._ipu):
                if isinstance(t, Variable):
                    if t.remote is None:  # remote variables live in their remote buffer
                        env[t] = self.variable(t)
                elif isinstance(t, Constant):
                    env[t] = self.constant(t)

    # ---- graphs ----
    def call_sites(self) -> dict[Graph, int]:
        """How many ops of the Ir call each graph (computed once)."""
        if self._call_sites is None:
            counts: dict[Graph, int] = {}
            for g in self.ir.graphs:
                for op in g.ops:
                    for called in op.called_graphs:
                        counts[called] = counts.get(called, 0) + 1
            self._call_sites = counts
        return self._call_sites

    def code_loaded_graphs(self) -> set[Graph]:
        return {
            op.attrs["graphs"][0]
            for g in self.ir.graphs
            for op in g.ops
            if op.definition.graphs == "code_load"
        }

    def lower_ops(
        self, graph: Graph, env: Env, prog: poplar.Sequence, only: list[OpNode] | None = None
    ) -> None:
        """Lower ``graph``'s ops (or those of ``only``, in graph order) into ``prog``."""
        from tremula.lowering import fusion  # imports the rule tables, which import us

        chosen = graph.ops if only is None else only
        items = fusion.plan(graph, chosen) if self.fuse_elementwise else chosen
        for item in items:
            if isinstance(item, fusion.Chain):
                with naming(item.ops):
                    fused = fusion.lower_chain(self, item, env, prog)
                if fused:
                    if self.on_lowered is not None:
                        self.on_lowered(len(item.ops))
                    continue
                ops = item.ops
            else:
                ops = [item]
            for op in ops:
                fn = rule_for(op.type)
                if fn is None:
                    raise NotImplementedError(
                        f"lowering: no rule for op type {op.type!r}: op {op.describe()}"
                    )
                with self.on_ipu(op.ipu), naming([op]):
                    op.definition.check_lowerable_dtypes(op)
                    fn(self, op, env, prog)
            if self.on_lowered is not None:
                self.on_lowered(len(ops))

    @property
    def replica_graph(self) -> poplar.Graph:
        """The graph of the whole replica (all its IPUs), whatever IPU is being lowered."""
        return self._ipu_graphs[0]

    @contextmanager
    def on_ipu(self, ipu: int | None) -> Iterator[None]:
        """Lower onto virtual IPU ``ipu``'s tiles (``popxl.ipu(n)``) while inside, when the
        replica spans more than one IPU; otherwise (one IPU, or no IPU given) unchanged."""
        root, before = self._ipu_graphs[0], self.graph
        per = root.target.tiles_per_ipu
        ipus = root.num_tiles // per
        if ipu is None or ipu < 0 or ipus <= 1 or root.num_tiles % per:
            yield
            return
        if len(self._ipu_graphs) == 1:
            self._ipu_graphs.extend(root.get_ipu_graph(k) for k in range(ipus))
        self.graph = self._ipu_graphs[1 + min(ipu, ipus - 1)]
        try:
            yield
        finally:
            self.graph = before

    def lower_main(self) -> poplar.Sequence:
        """The main graph as one control program (every op of it in the Normal context)."""
        programs = self.lower_programs()
        if any(p.programs for p in programs[1:]):
            raise NotImplementedError(
                "lower_main: the main graph has ops in the weights-from/to-host fragments; "
                "use lower_programs"
            )
        return programs[0]

    def lower_programs(self) -> list[poplar.Sequence]:
        """The main graph as PopART's three programs: ``[main, weights-from-host fragment,
        weights-to-host fragment]``. Ops made in ``ExecutionContext.WeightsFromHostFragment``
        / ``WeightsToHostFragment`` lower into the second / third; what they produce stays on
        the device for the others to read (Poplar tensors persist between programs)."""
        main = self.ir.main_graph
        env = Env()
        self.bind_leaves(main, env)
        parts: dict[ExecutionContext, list[OpNode]] = {c: [] for c in FRAGMENTS}
        made_in: dict[Tensor, int] = {}  # tensor -> the position of its program in ORDER
        for op in main.ops:
            ctx = op.execution_context if op.execution_context in FRAGMENTS else _NORMAL
            for t in op.inputs:
                if made_in.get(t, 0) > ORDER.index(ctx):
                    raise NotImplementedError(
                        f"lowering: {op!r} ({ctx!r}) reads {t.id!r}, made by an op of a "
                        f"program that runs after it ({ORDER[made_in[t]]!r})"
                    )
            made_in.update((t, ORDER.index(ctx)) for t in op.outputs)
            parts[ctx].append(op)
        progs = {c: poplar.Sequence(name=name) for c, name in FRAGMENTS.items()}
        for c in ORDER:
            self.lower_ops(main, env, progs[c], parts[c])  # producers before readers
        return [progs[c] for c in FRAGMENTS]

    def subgraph(self, graph: Graph) -> LoweredGraph:
        """``graph`` as a Poplar function (lowered once, called from every site)."""
        done = self.functions.get(graph)
        if done is not None:
            return done
        env = Env()
        self.bind_leaves(graph, env)
        inputs = []
        for t in graph.inputs:
            with self.on_ipu(_input_ipu(graph, t)):
                inputs.append(self.new_tensor(t, name=t.id))
        env.update(zip(graph.inputs, inputs))
        body = poplar.Sequence(name=graph.name)
        self.lower_ops(graph, env, body)
        outputs = [env[t] for t in graph.outputs]
        fn = self.graph.add_function(body, graph.name)
        lowered = LoweredGraph(fn, inputs, outputs)
        self.functions[graph] = lowered
        return lowered

    def copy(self, src: poplar.Tensor, dst: poplar.Tensor, prog: poplar.Sequence) -> None:
        if src is dst or (src.shape == dst.shape and src.same_as(dst)):
            return
        prog.add(poplar.Copy(src, dst))


def _input_ipu(graph: Graph, t: Tensor) -> int | None:
    """The virtual IPU a graph input lives on: its own (made inside ``popxl.ipu``), else that
    of the first op reading it (a graph built outside ``popxl.ipu``, as popxl-addons'
    pipeline stages are), else the caller's (None)."""
    if t._ipu is not None:
        return t._ipu
    for op in graph.ops:
        if any(x is t for x in op.inputs):
            return op.ipu_of(t)
    return None
