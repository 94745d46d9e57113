"""The graph context stack and the scoped settings PopXL programs use: ``with graph:``,
``in_sequence``, ``name_scope``, ``ipu``, ``io_tiles``; ``gcg`` / ``gmg`` / ``gir``."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from tremula.popxl.graph import Graph
    from tremula.popxl.ir import Ir


class Context:
    """What ops created now are created in, and with which settings."""

    def __init__(self) -> None:
        self.graphs: list[Graph] = []
        self.sequences: list[Any] = []  # in_sequence modes (True, False, "pass")
        self.scopes: list[str] = []
        self.ipus: list[int] = []
        self.tile_sets: list[str] = []

    @property
    def graph(self) -> Graph:
        if not self.graphs:
            raise RuntimeError(
                "no graph is in context: use `with ir.main_graph:` or "
                "`with graph:` before creating tensors or ops"
            )
        return self.graphs[-1]

    @property
    def name_scope(self) -> str:
        return "/".join(self.scopes)

    @property
    def ipu(self) -> int | None:
        return self.ipus[-1] if self.ipus else None

    @property
    def io_tiles(self) -> bool:
        return bool(self.tile_sets) and self.tile_sets[-1] == "io"

    def push_graph(self, graph: Graph) -> None:
        if self.graphs and self.graphs[-1].ir is not graph.ir:
            raise RuntimeError(
                f"cannot enter {graph!r} of {graph.ir!r} inside a graph of "
                f"{self.graphs[-1].ir!r}: graphs of different Irs do not nest"
            )
        self.graphs.append(graph)

    def pop_graph(self, graph: Graph) -> None:
        if not self.graphs or self.graphs[-1] is not graph:
            raise RuntimeError(f"graph context exited out of order for {graph!r}")
        self.graphs.pop()


_CONTEXT = Context()


def get_current_context() -> Context:
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
    packages do this to the functions they export)."""
    for name in names:
        if inspect.isfunction(namespace[name]):
            namespace[name] = atomic(namespace[name])


@contextmanager
def in_sequence(mode: bool | str = True) -> Iterator[None]:
    """Ops created inside run in creation order (``True``); ``False`` constrains nothing
    (but acts as one unit inside a ``True`` block); ``"pass"`` does nothing. Tremula runs
    ops in creation order wherever data dependencies allow, which satisfies all three."""
    if mode is None or mode not in (True, False, "pass"):
        raise TypeError(f"in_sequence: mode must be True, False or 'pass', got {mode!r}")
    _CONTEXT.sequences.append(mode)
    try:
        yield
    finally:
        _CONTEXT.sequences.pop()


@contextmanager
def name_scope(name: str) -> Iterator[None]:
    """Prefix the names of tensors created inside with ``name/``."""
    _CONTEXT.scopes.append(str(name))
    try:
        yield
    finally:
        _CONTEXT.scopes.pop()


@contextmanager
def ipu(ipu: int) -> Iterator[None]:
    """Place ops created inside on virtual IPU ``ipu``."""
    if int(ipu) != ipu or ipu < 0:
        raise ValueError(f"ipu: expected a non-negative integer, got {ipu!r}")
    _CONTEXT.ipus.append(int(ipu))
    try:
        yield
    finally:
        _CONTEXT.ipus.pop()


@contextmanager
def io_tiles() -> Iterator[None]:
    """Place ops created inside on the IO tiles."""
    _CONTEXT.tile_sets.append("io")
    try:
        yield
    finally:
        _CONTEXT.tile_sets.pop()


def op_debug_context(fn: Callable[..., Any]) -> Callable[..., Any]:
    """PopXL's debug-context decorator: a no-op wrapper in Tremula."""
    return fn


def debug_context_frame_offset(offset: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        return fn

    return decorate
