"""The graph context stack and the scoped settings PopXL programs use: ``with graph:``,
``in_sequence``, ``name_scope``, ``ipu``, ``io_tiles``; ``gcg`` / ``gmg`` / ``gir``."""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from tremula.popxl.tensorlocation import ExecutionContext, TileSet

if TYPE_CHECKING:
    from tremula.popxl.graph import Graph
    from tremula.popxl.ir import Ir
    from tremula.popxl.ops.base import OpNode


@dataclass(frozen=True)
class OpSettings:
    """The settings an op is created with (``Context._get_op_settings``): its name, graph,
    virtual IPU, tile set, execution context and name scope."""

    name: str
    graph: Graph
    ipu: int
    tile_set: TileSet
    execution_context: ExecutionContext
    scope: str


class Context:
    """What ops created now are created in, and with which settings (PopXL's
    ``popxl.context.Context``; the one instance is ``get_current_context()``)."""

    def __init__(self) -> None:
        self.graphs: list[Graph] = []
        self.sequences: list[Any] = []  # in_sequence modes (True, False, "pass")
        self.scopes: list[str] = []
        self.ipus: list[int] = []  # popxl.ipu blocks (NO_IPU for popxl.ipu(None))
        self.tile_sets: list[str] = []
        self.execution_contexts: list[ExecutionContext] = []
        self._frames: list[_SequenceFrame] = []  # one per open in_sequence block

    @property
    def graph(self) -> Graph:
        if not self.graphs:
            raise RuntimeError(  # PopXL's words (its tests match the first sentence)
                "Trying to access a graph, but no graph has been selected. Hint - try "
                "performing the operations in a context manager (e.g. `with graph_instance:`) "
                "or inside of a function that's called by `popxl.Ir().create_graph()`"
            )
        return self.graphs[-1]

    @property
    def name_scope(self) -> str:
        return "/".join(self.scopes)

    @property
    def name_scopes(self) -> list[str]:
        """The open ``name_scope`` names, outermost first (a copy)."""
        return list(self.scopes)

    @property
    def ipu(self) -> int | None:
        """The virtual IPU set by the innermost ``popxl.ipu``; None outside any."""
        return self.ipus[-1] if self.ipus else None

    @property
    def ipu_id(self) -> int:
        """The virtual IPU new ops are placed on (0 unless ``popxl.ipu`` says otherwise)."""
        return self.ipus[-1] if self.ipus else 0

    @property
    def io_tiles(self) -> bool:
        return bool(self.tile_sets) and self.tile_sets[-1] == "io"

    @property
    def io_tile_set(self) -> bool:
        """Whether new ops are placed on the IO tiles (``popxl.io_tiles``)."""
        return self.io_tiles

    @property
    def in_sequence(self) -> bool | None:
        """The innermost ``in_sequence`` mode (None outside any, or for ``"pass"``)."""
        mode = self.sequences[-1] if self.sequences else None
        return None if mode == "pass" else mode

    @property
    def execution_context(self) -> ExecutionContext:
        """The part of the program new ops run in (``_execution_context``)."""
        return self.execution_contexts[-1] if self.execution_contexts else ExecutionContext.Normal

    def push_graph(self, graph: Graph) -> None:
        if self.graphs and self.graphs[-1].ir is not graph.ir:
            raise RuntimeError(
                f"Trying to enter {graph!r} of {graph.ir!r}, but the previous context's Ir "
                f"is different ({self.graphs[-1].ir!r}): graphs of different Irs do not nest"
            )
        self.graphs.append(graph)

    def pop_graph(self, graph: Graph | None = None) -> Graph:
        """Leave the innermost graph and return it (PopXL's ``pop_graph()`` takes no
        argument; ``graph``, when given, must be that innermost graph).

        Raises:
            RuntimeError: no graph is entered, or ``graph`` is not the innermost one.
        """
        if not self.graphs or (graph is not None and self.graphs[-1] is not graph):
            raise RuntimeError(
                f"graph context exited out of order for {graph!r}"
                if self.graphs
                else "pop_graph: no graph has been entered (the graph stack is empty)"
            )
        return self.graphs.pop()

    def _get_op_settings(self, name: str) -> OpSettings:
        """The settings of an op named ``name`` created now in the current graph."""
        return OpSettings(
            name,
            self.graph,
            self.ipu_id,
            TileSet.IO if self.io_tiles else TileSet.Compute,
            self.execution_context,
            self.name_scope,
        )

    def _op_created(self, op: OpNode) -> None:
        """Called for each op added to a graph: adds its in-sequence constraints and runs
        the graph's op-created hooks."""
        self._add_in_sequence_topocons(op)
        for hook in list(op.graph._hooks.values()):
            hook(op)

    def _add_in_sequence_topocons(self, op: OpNode) -> None:
        """Constrain ``op`` to run after the ops created before it in the innermost
        ``in_sequence`` block (:class:`_SequenceFrame`), recording PopART's topological
        constraints in its graph (``Graph.topocons``). Outside any block, and in
        ``in_sequence("pass")``, nothing is added. An op of another graph than the one in
        context is refused, as PopART refuses a constraint between graphs.

        Raises:
            ValueError: ``op`` is not in the current graph; the innermost block's mode is
                not True, False or "pass".
        """
        if self.graphs and op.graph is not self.graphs[-1]:
            raise ValueError(
                f"in_sequence: {op!r} is in graph {op.graph.name!r}, not in the current graph "
                f"{self.graphs[-1].name!r}"
            )
        frame = self._frames[-1] if self._frames else None
        if frame is not None and frame.invalid:
            raise ValueError(
                f"Unknown in_sequence mode: {frame.invalid[0]!r} (op {op.type!r} in graph "
                f"{op.graph.name!r}): the mode must be True, False or 'pass'"
            )
        if frame is not None and frame.mode is not None:
            frame.add(op)


class _SequenceFrame:
    """The ordering state of one open ``in_sequence`` block, per graph.

    ``in_sequence(True)``: each op created runs after ``frontier`` (the previous op, or
    the ops of a nested ``False`` block), then is the frontier. ``in_sequence(False)``:
    its ops are not ordered among themselves; inside a ``True`` block they all run after
    the ops before the block (``base``), and the ops after it run after all of them, as
    one unit. ``"pass"`` (``mode`` None) orders nothing, and the blocks inside it start
    afresh. A ``True`` block outside any other continues from where the graph's last one
    ended (``Graph._sequence_frontier``).
    """

    def __init__(self, mode: bool | None, parent: _SequenceFrame | None) -> None:
        self.mode = mode
        self.parent = parent if parent is not None and parent.mode is not None else None
        self.top = parent is None  # not inside another block (nor inside "pass")
        self.frontier: dict[int, list[OpNode]] = {}  # True: what the next op follows
        self.base: dict[int, list[OpNode]] = {}  # False: what the block's ops follow
        self.members: dict[int, list[OpNode]] = {}  # False: the block's ops
        self.graphs: dict[int, Graph] = {}
        self.invalid: tuple[Any, ...] = ()  # (mode,) for a mode PopXL refuses at an op

    def start(self, graph: Graph) -> list[OpNode]:
        """What the block's first op in ``graph`` (True) or each of its ops (False)
        follows."""
        key = id(graph)
        if key not in self.graphs:
            self.graphs[key] = graph
            if self.parent is not None:
                inherited = self.parent.start(graph)
            elif self.mode is True and self.top:
                inherited = graph._sequence_frontier
            else:
                inherited = []
            if self.mode is True:
                self.frontier[key] = list(inherited)
            else:
                self.base[key], self.members[key] = list(inherited), []
        return self.frontier[key] if self.mode is True else self.base[key]

    def add(self, op: OpNode) -> None:
        graph = op.graph
        befores = [r for b in self.start(graph) for r in graph._resolve(b)]
        for b in befores:
            graph._add_topocon(b, op)
        if self.mode is True:
            self.frontier[id(graph)] = [op]
        else:
            self.members[id(graph)].append(op)

    def close(self) -> None:
        """Hand what the block ends with to the block around it."""
        for key, graph in self.graphs.items():
            if self.mode is True:
                made = last = self.frontier[key]
            else:
                made, last = self.members[key], self.members[key] or self.base[key]
            if self.parent is None:
                if self.mode is True and self.top:
                    graph._sequence_frontier = list(last)
            elif self.parent.mode is True:
                self.parent.start(graph)
                self.parent.frontier[key] = list(last)
            else:
                self.parent.start(graph)
                self.parent.members[key].extend(made)


_CONTEXT = Context()


def get_current_context() -> Context:
    """The context ops are created in."""
    return _CONTEXT


def get_current_graph() -> Graph:
    """The graph in context (``gcg``); ``RuntimeError`` if none."""
    return _CONTEXT.graph


def get_main_graph() -> Graph:
    """The main graph of the Ir in context (``gmg``)."""
    return _CONTEXT.graph.ir.main_graph


def get_ir() -> Ir:
    """The Ir in context (``gir``)."""
    return _CONTEXT.graph.ir


gcg = get_current_graph
gmg = get_main_graph
gir = get_ir


@contextmanager
def undo_on_error() -> Iterator[None]:
    """If the block raises, undo what it added to the graph in context (tensors, ops,
    inputs, outputs), so that a refused call leaves the graph as it was."""
    graph = _CONTEXT.graphs[-1] if _CONTEXT.graphs else None
    mark = graph._mark() if graph is not None else None
    try:
        yield
    except BaseException:
        if graph is not None:
            graph._truncate(mark)  # type: ignore[arg-type]
        raise


F = TypeVar("F", bound=Callable[..., Any])


def atomic(fn: F) -> F:
    """``fn`` run inside :func:`undo_on_error`: an op function that makes constants from
    host values, or several ops, and is then refused adds nothing."""

    if getattr(fn, "_atomic", False):
        return fn

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with undo_on_error():
            return fn(*args, **kwargs)

    wrapper._atomic = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def make_atomic(namespace: dict[str, Any], names: Iterable[str]) -> None:
    """Replace each function ``namespace[name]`` by its :func:`atomic` form (the op
    packages do this to the functions they export), in ``namespace`` and in the module that
    defines it, so that every import path gives the same function."""
    for name in names:
        fn = namespace[name]
        if inspect.isfunction(fn) and not getattr(fn, "_atomic", False):
            wrapped = atomic(fn)
            namespace[name] = wrapped
            home = sys.modules.get(getattr(fn, "__module__", ""))
            fname = getattr(fn, "__name__", "")
            if home is not None and getattr(home, fname, None) is fn:
                setattr(home, fname, wrapped)


@contextmanager
def in_sequence(mode: bool | str = True) -> Iterator[None]:
    """Ops created inside run in creation order (``True``); ``False`` constrains nothing
    (but acts as one unit inside a ``True`` block); ``"pass"`` does nothing. Tremula runs
    ops in creation order wherever data dependencies allow, which satisfies all three.

    Another mode is refused where PopXL refuses it: entering the block succeeds, and the
    first op created in it (not inside a valid block nested in it) raises ``ValueError``
    and is not added (PopXL's context checks the mode when it adds an op's constraints).

    Raises:
        TypeError: ``mode`` is None.
    """
    if mode is None:
        raise TypeError("`None` cannot be passed to in_sequence: use True, False or 'pass'")
    parent = _CONTEXT._frames[-1] if _CONTEXT._frames else None
    valid = mode in (True, False, "pass")
    frame = _SequenceFrame(None if mode == "pass" or not valid else bool(mode), parent)
    if not valid:
        frame.invalid = (mode,)
    _CONTEXT.sequences.append(mode)
    _CONTEXT._frames.append(frame)
    try:
        yield
    finally:
        _CONTEXT.sequences.pop()
        _CONTEXT._frames.pop()
        frame.close()


@contextmanager
def name_scope(name: str) -> Iterator[None]:
    """Prefix the names of tensors created inside with ``name/``."""
    _CONTEXT.scopes.append(str(name))
    try:
        yield
    finally:
        _CONTEXT.scopes.pop()


#: the virtual graph id of ops made inside ``popxl.ipu(None)`` (PopART's unset id)
NO_IPU = -1


@contextmanager
def ipu(ipu: int | None) -> Iterator[None]:
    """Place ops created inside on virtual IPU ``ipu`` (ops outside any ``ipu`` block are on
    IPU 0). ``None`` places them on no IPU (virtual graph id -1): their outputs' ``.ipu`` is
    undefined (``UndefinedValue``) and ``ipu_copy`` of them needs ``source``.

    Raises:
        ValueError: ``ipu`` is neither None nor an integer >= 0.
    """
    if ipu is not None and (isinstance(ipu, bool) or int(ipu) != ipu or ipu < 0):
        raise ValueError(f"ipu: expected None or a non-negative integer, got {ipu!r}")
    _CONTEXT.ipus.append(NO_IPU if ipu is None else int(ipu))
    try:
        yield
    finally:
        _CONTEXT.ipus.pop()


@contextmanager
def _placed(ipu: int | None = None, tile_set: str | None = None) -> Iterator[None]:
    """Create ops (and their outputs) on virtual IPU ``ipu`` (``NO_IPU`` for none) and on
    ``tile_set`` (``"compute"`` or ``"io"``) while inside; None leaves that setting as the
    enclosing context has it."""
    if ipu is not None:
        _CONTEXT.ipus.append(int(ipu))
    if tile_set is not None:
        _CONTEXT.tile_sets.append(tile_set)
    try:
        yield
    finally:
        if ipu is not None:
            _CONTEXT.ipus.pop()
        if tile_set is not None:
            _CONTEXT.tile_sets.pop()


@contextmanager
def io_tiles() -> Iterator[None]:
    """Place ops created inside on the IO tiles."""
    _CONTEXT.tile_sets.append("io")
    try:
        yield
    finally:
        _CONTEXT.tile_sets.pop()


@contextmanager
def _execution_context(execution_context: ExecutionContext) -> Iterator[None]:
    """Create the ops inside in ``execution_context`` (PopXL's internal context manager, used
    to put ops in the weights-from-host / weights-to-host fragments)."""
    if not isinstance(execution_context, ExecutionContext):
        raise TypeError(
            f"_execution_context: expected a popxl.ExecutionContext, got {execution_context!r}"
        )
    _CONTEXT.execution_contexts.append(execution_context)
    try:
        yield
    finally:
        _CONTEXT.execution_contexts.pop()


def op_debug_context(fn: Callable[..., Any]) -> Callable[..., Any]:
    """PopXL's debug-context decorator: a no-op wrapper in Tremula."""
    return fn


def debug_context_frame_offset(offset: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        return fn

    return decorate
