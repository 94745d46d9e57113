"""PopART's small binding types that build an IR through ``popart._internal.ir``:
``OperatorIdentifier`` and ``NumInputs`` (what an op is), ``Settings`` (where an op made by
``Graph.createOp_<X>`` goes and its name), ``DebugContext`` / ``DebugInfo`` (names carried
for debugging), ``Scope`` and the module functions ``addScope`` / ``removeScope`` (a
subgraph's tensor ids carry the graph's id as their scope: ``g/t``)."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any

from tremula.errors import PopartException
from tremula.popxl.tensorlocation import ExecutionContext, TileSet

if TYPE_CHECKING:
    from tremula.popxl._ir.graph import Graph


class NumInputs:
    """PopART's ``NumInputs(min=0, max=min)``: how many inputs an op takes."""

    def __init__(self, min: int = 0, max: int | None = None) -> None:
        self.min = int(min)
        self.max = self.min if max is None else int(max)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NumInputs) and (other.min, other.max) == (self.min, self.max)

    def __hash__(self) -> int:
        return hash((self.min, self.max))

    def __repr__(self) -> builtins.str:
        return f"NumInputs({self.min}, {self.max})"


class OperatorIdentifier:
    """PopART's ``OperatorIdentifier(domain, type, version, numInputs=NumInputs(),
    numOutputs=0)``; two are equal when domain, type and version are (as PopART's
    ``operator==``)."""

    def __init__(
        self,
        domain: builtins.str,
        type: builtins.str,
        version: int,
        numInputs: NumInputs | None = None,
        numOutputs: int = 0,
    ) -> None:
        self.domain = builtins.str(domain)
        self.type = builtins.str(type)
        self.version = int(version)
        self.numInputs = NumInputs() if numInputs is None else numInputs
        self.numOutputs = int(numOutputs)

    def _key(self) -> tuple[builtins.str, builtins.str, int]:
        return self.domain, self.type, self.version

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OperatorIdentifier) and other._key() == self._key()

    def __lt__(self, other: OperatorIdentifier) -> bool:
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> builtins.str:
        return f"OperatorIdentifier({self.domain!r}, {self.type!r}, {self.version})"


class DebugContext:
    """PopART's ``DebugContext(name="")``: the name given to what is made with it."""

    def __init__(self, name: Any = "", *args: Any) -> None:
        self.name = builtins.str(getattr(name, "name", name))

    def __repr__(self) -> builtins.str:
        return f"DebugContext({self.name!r})"


class DebugInfo:
    """PopART's ``DebugInfo(debugContext, layer)`` (``layer``: "popxl", "popart", ...)."""

    def __init__(self, debugContext: Any = None, layer: builtins.str = "popart") -> None:
        self.name = debug_name(debugContext)
        self.layer = builtins.str(layer)
        self.values: dict[builtins.str, Any] = {}

    def getId(self) -> int:
        """An id unique among the debug infos alive."""
        return id(self)

    def setValue(self, name: builtins.str, value: Any) -> bool:
        """Record a named value with the debug info (kept in ``values``)."""
        self.values[builtins.str(name)] = value
        return True


def debug_name(debug: Any) -> builtins.str:
    """The name a debug argument (a ``DebugContext``, ``DebugInfo`` or string) carries."""
    if debug is None:
        return ""
    return builtins.str(getattr(debug, "name", debug))


class Scope:
    """PopART's ``Scope``: a path of names (``Scope() / "a" / "b"`` is ``a/b``)."""

    def __init__(self, names: Any = ()) -> None:
        self._names = tuple(builtins.str(n) for n in names)

    def __truediv__(self, name: builtins.str) -> Scope:
        return Scope((*self._names, *filter(None, builtins.str(name).split("/"))))

    def str(self) -> builtins.str:
        return "/".join(self._names)

    __str__ = str

    def empty(self) -> bool:
        return not self._names

    def depth(self) -> int:
        return len(self._names)

    def pop(self) -> None:
        self._names = self._names[:-1]

    def getCommonParent(self, other: Scope) -> Scope:
        """The longest scope both lie in (their common leading names; PopART's
        ``Scope::getCommonParent``)."""
        common = []
        for mine, theirs in zip(self._names, other._names):
            if mine != theirs:
                break
            common.append(mine)
        return Scope(common)

    def isSubscope(self, other: Scope) -> bool:
        """Whether this scope lies strictly inside ``other``."""
        n = len(other._names)
        return len(self._names) > n and self._names[:n] == other._names

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Scope) and other._names == self._names

    def __hash__(self) -> int:
        return hash(self._names)

    def __repr__(self) -> builtins.str:
        return f"Scope({self.str()!r})"


def graph_scope(graph: Graph) -> Scope:
    """A graph's scope: empty for the main graph, its id for a subgraph (PopART's
    ``Graph::getScope``)."""
    gid = graph.id.str()
    return Scope((gid,) if gid else ())


def addScope(graph: Graph, tensorId: builtins.str) -> builtins.str:
    """``tensorId`` under the graph's scope: ``g/t`` in subgraph ``g``, ``t`` in the main
    graph."""
    scope = graph_scope(graph).str()
    return f"{scope}/{tensorId}" if scope else builtins.str(tensorId)


def removeScope(graph: Graph, tensorId: builtins.str) -> builtins.str:
    """``tensorId`` without the graph's scope.

    Raises:
        popart_exception: the id does not start with the graph's scope.
    """
    scope = graph_scope(graph).str()
    if not scope:
        return builtins.str(tensorId)
    prefix = f"{scope}/"
    if not builtins.str(tensorId).startswith(prefix):
        raise PopartException(
            f"Cannot remove scope from {tensorId} as it does not start with scope {scope}"
        )
    return builtins.str(tensorId)[len(prefix) :]


class Settings:
    """PopART's ``Op::Settings(graph, name, [scope], [debugInfoId])`` for an op made through
    ``Graph.createOp_<X>`` / ``createConnectedOp_<X>``: its graph and name, and the placement
    fields PopART's settings carry (``vgraphId`` None, compute tiles, the normal execution
    context, until set)."""

    def __init__(self, graph: Any, name: builtins.str = "", *args: Any) -> None:
        from tremula.popxl._ir.graph import Graph
        from tremula.popxl._ir.ir import Ir

        if isinstance(graph, Ir):  # Settings(ir, name): the op goes in the main graph
            graph = graph.getMainGraph()
        if not isinstance(graph, Graph):
            raise TypeError(
                f"Settings: expected a popart._internal.ir.Graph (or Ir), got "
                f"{type(graph).__name__}"
            )
        self.graph = graph
        self.name = builtins.str(name)
        self.vgraphId: int | None = None
        self.tileSet = TileSet.Compute
        self.executionContext = ExecutionContext.Normal
        self.scope = next((a for a in args if isinstance(a, Scope)), Scope())

    def getIr(self) -> Any:
        return self.graph.getIr()

    def __repr__(self) -> builtins.str:
        return f"Settings({self.graph!r}, {self.name!r})"


class _Optional:
    """PopART's ``nonstd::optional`` of a value (``OptionalFloat()``: unset,
    ``OptionalFloat(0.5)``), as PopXL passes optional op arguments; ``value`` is None when
    unset."""

    _convert: Any = staticmethod(lambda v: v)

    def __init__(self, value: Any = None) -> None:
        self.value = None if value is None else type(self)._convert(value)

    def has_value(self) -> bool:
        return self.value is not None

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.value == self.value  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.value))

    def __repr__(self) -> builtins.str:
        return f"{type(self).__name__}({'' if self.value is None else repr(self.value)})"


class OptionalFloat(_Optional):
    """``OptionalFloat()`` / ``OptionalFloat(0.5)``."""

    _convert = staticmethod(float)


class OptionalInt(_Optional):
    """``OptionalInt()`` / ``OptionalInt(3)``."""

    _convert = staticmethod(int)


class OptionalDataType(_Optional):
    """``OptionalDataType()`` / ``OptionalDataType(DataType.FLOAT16)``."""

    @staticmethod
    def _convert(value: Any) -> Any:
        from tremula.popxl._ir.core.enums import DataType

        if not isinstance(value, DataType):
            raise TypeError(f"OptionalDataType: expected a DataType, got {value!r}")
        return value
