"""``popart._internal.ir.Ir`` (``ir._pb_ir``): a view of a Tremula Ir with PopART's methods
(one handle per Ir): its graphs, its session options, its patterns."""

from __future__ import annotations

import json
import weakref
from typing import Any

from tremula.errors import PopartException
from tremula.popxl._ir.core.enums import PopartEnum, VirtualGraphMode
from tremula.popxl._ir.core.options import SessionOptions
from tremula.popxl._ir.graph import Graph, GraphId, graph_handle, graph_id
from tremula.popxl._ir.handles import register, view_of
from tremula.popxl._ir.patterns import Patterns, PatternsLevel
from tremula.popxl._ir.tensor import RemoteBufferInfo, TensorInfo
from tremula.popxl._ir.unsupported import unsupported_attr
from tremula.popxl.ir import Ir as XlIr


def session_options(ir: XlIr) -> SessionOptions:
    """PopART's ``SessionOptions`` of the Ir, with what ``popxl.Ir`` sets in PopXL.

    PopXL keeps its Ir's options in PopART's ``SessionOptions`` (``core/options.py``, the
    class ``popart.SessionOptions`` is); Tremula makes them on first use. ``numIOTiles``
    and the other fields are the program's to set and read; the replication fields follow
    the Ir.
    """
    opts = _OPTIONS.get(ir)
    if opts is None:
        opts = _OPTIONS[ir] = SessionOptions()
        for name, value in _POPXL_DEFAULTS.items():
            setattr(opts, name, value)
    if ir._popdist:  # Ir("popdist") calls popdist.popart.configureSessionOptions
        fields = ir._layout.session_options()
    else:  # the replication_factor setter: this process's replicas, nothing global
        fields = {
            "enableReplicatedGraphs": ir.replication_factor > 1,
            "replicatedGraphCount": ir.replication_factor,
            "enableDistributedReplicatedGraphs": False,
            "globalReplicaOffset": 0,
            "globalReplicationFactor": 1,
        }
    for name, value in fields.items():
        setattr(opts, name, value)
    return opts


#: what popxl.Ir sets in its SessionOptions (PopXL's ir.py)
_POPXL_DEFAULTS: dict[str, Any] = {
    "virtualGraphMode": VirtualGraphMode.Manual,
    "useHostCopyOps": True,
    "enableExplicitMainLoops": True,
    "explicitRecomputation": True,
    "aliasZeroCopy": True,
    "enableInplaceAmbiguityChecking": True,
    "enableVariablesCaching": False,
    "decomposeGradSum": True,
}

_OPTIONS: weakref.WeakKeyDictionary[XlIr, SessionOptions] = weakref.WeakKeyDictionary()
_PATTERNS: weakref.WeakKeyDictionary[XlIr, Patterns] = weakref.WeakKeyDictionary()


class SerialiseFormat(PopartEnum):
    """PopART's ``Ir.SerialiseFormat``: the formats ``Ir.serialise`` writes (JSON only)."""

    JSON = 0


_Format = SerialiseFormat  # (inside Ir the name is the class attribute)


class DataFlowView:
    """The Ir's ``DataFlow`` as ``Ir.getDataFlow`` gives it (PopXL keeps
    ``num_host_transfers`` in it as the batches per step): a live view of the Ir's
    ``num_host_transfers``. A PopXL program's host transfers are its streams, so no tensor
    is anchored."""

    def __init__(self, ir: XlIr) -> None:
        self._ir = ir

    def batchesPerStep(self) -> int:
        return self._ir.num_host_transfers

    def setBatchesPerStep(self, batchesPerStep: int) -> None:
        """Set the Ir's ``num_host_transfers``.

        Raises:
            popart_exception: a value below 1 (PopART's words), leaving it unchanged.
        """
        if int(batchesPerStep) <= 0:
            raise PopartException("'Batches per step' must be greater than zero")
        self._ir.num_host_transfers = int(batchesPerStep)

    def anchors(self) -> list[str]:
        return []

    def nAnchors(self) -> int:
        return 0

    def isAnchored(self, anchorId: str) -> bool:
        return False

    def __repr__(self) -> str:
        return f"DataFlow(batchesPerStep={self.batchesPerStep()}, anchors=[])"


class Ir:
    """A Tremula Ir as PopART's ``Ir`` bindings show it (``ir._pb_ir``)."""

    SerialiseFormat = SerialiseFormat

    def __init__(self, ir: XlIr | None = None) -> None:
        """``Ir()`` makes a new, empty IR (a ``popxl.Ir`` of one replica, which
        ``popxl.Ir._from_pb`` gives back); ``Ir(popxl_ir)`` is the view of one (what
        ``ir._pb_ir`` gives: one view per Ir)."""
        if ir is None:
            ir = XlIr()
            register(ir, self)
        self._ir = ir

    def getId(self) -> int:
        return self._ir.id

    def getMainGraph(self) -> Graph:
        return graph_handle(self._ir.main_graph)

    def _by_id(self) -> list[Any]:
        """The Ir's graphs in PopART's order: by id (PopART keeps them in a ``std::map``
        keyed by ``GraphId``), so the main graph (id ``""``) comes first."""
        return sorted(self._ir.graphs, key=lambda g: graph_id(g).str())

    def getAllGraphs(self) -> list[Graph]:
        """Every graph of the Ir, by id (the main graph first)."""
        return [graph_handle(g) for g in self._by_id()]

    def getGraphSchedule(self, root: GraphId | str | None = None) -> list[Graph]:
        """The graphs reachable from ``root`` (default: the main graph), each once, a graph
        before the graphs its ops call, in the order of its op schedule (PopART's
        ``Ir::getGraphSchedule``: a depth-first walk).

        Raises:
            popart_exception: without a root, some graph of the Ir is called from nowhere
                the main graph reaches (PopART schedules all of them or none).
        """
        start = self.getMainGraph() if root is None else self.getGraph(root)
        order: list[Graph] = []

        def visit(graph: Graph) -> None:
            if graph in order:
                return
            order.append(graph)
            for op in graph.getOpSchedule():
                for called in op.getCalledGraphs():
                    visit(called)

        visit(start)
        if root is None and len(order) != len(self._ir.graphs):
            raise PopartException(
                f"Unable to schedule all graphs. {len(order)} != {len(self._ir.graphs)}"
            )
        return order

    def getGraph(self, graphId: GraphId | str) -> Graph:
        gid = graphId if isinstance(graphId, GraphId) else GraphId(graphId)
        for g in self._ir.graphs:
            if graph_id(g) == gid:
                return graph_handle(g)
        raise PopartException(f"No graph with id {gid.str()!r} in the Ir")

    def hasGraph(self, graphId: GraphId | str) -> bool:
        gid = graphId if isinstance(graphId, GraphId) else GraphId(graphId)
        return any(graph_id(g) == gid for g in self._ir.graphs)

    # ---- tensors and ops of every graph ----
    def getAllOps(self) -> list[Any]:
        """The ops of every graph (graphs by id, the main graph's first), each graph's by op
        id, as PopART's ``Ir::getAllOps``."""
        return [op for g in self._by_id() for op in sorted(g._ops, key=lambda op: op.id)]

    def getTensorIds(self) -> list[str]:
        """The ids of the tensors of every graph (subgraph ids carry the graph's scope)."""
        return sorted(tid for g in self._ir.graphs for tid in g._tensors)

    def containsTensor(self, tensorId: str) -> bool:
        return any(str(tensorId) in g._tensors for g in self._ir.graphs)

    def getTensor(self, tensorId: str) -> Any:
        """The tensor of that id in whichever graph holds it (PopART's ``Ir::getTensor``).

        Raises:
            popart_exception: no graph of the Ir holds it.
        """
        for g in self._ir.graphs:
            if str(tensorId) in g._tensors:
                return graph_handle(g).getTensor(str(tensorId))
        raise PopartException(f"No Ir::Tensor with TensorId '{tensorId}' in Ir::getTensor(..)")

    def createUniqueSubgraphId(self, base: GraphId | str) -> GraphId:
        """``<base>_subgraph(<n>)``, ``n`` counting the ids made so far (those of
        ``create_graph`` and ``create_empty_graph`` too), so each call gives a new id."""
        return GraphId(f"{base}_subgraph({self._ir._subgraph_id()})")

    def createIntermediateTensorId(self, base: str) -> str:
        """``<base>__t<n>``, ``n`` counting the ids made so far in this Ir (PopART's
        ``Ir::createIntermediateTensorId``)."""
        return self._ir._intermediate_id(str(base))

    def createGraph(self, graphId: GraphId | str) -> Graph:
        """A new empty subgraph of id ``graphId``.

        Raises:
            popart_exception: the Ir has a graph of that id (or the id is the main
                graph's, ``""``).
        """
        gid = graphId if isinstance(graphId, GraphId) else GraphId(graphId)
        if not gid.str() or self.hasGraph(gid):
            raise PopartException(f"Graph({gid.str()}) is already in Ir")
        return graph_handle(self._ir._new_graph(gid.str()))

    def removeGraph(self, graphId: GraphId | str) -> None:
        """Remove a subgraph that no op calls.

        Raises:
            popart_exception: no such graph, the main graph, or a graph an op calls.
        """
        g = self.getGraph(graphId)._g
        if g is self._ir.main_graph:
            raise PopartException("removeGraph: the main graph cannot be removed")
        callers = graph_handle(g).getCallSiteOps()
        if callers:
            raise PopartException(f"removeGraph: {g.name!r} is called by {callers}")
        self._ir._graphs.remove(g)

    def isPrepared(self) -> bool:
        return self._ir._prepared

    def logIr(self) -> None:
        """Log the IR as PopART serialises it to JSON (``ir_log.py``: graphs, each op's
        type, name, inputs, outputs and attributes) at INFO on PopART's ``ir`` logger:
        ``popart.getLogger("ir").setLevel("INFO")`` shows it."""
        from tremula.popxl._ir.ir_log import log_ir

        log_ir(self._ir)

    def serialise(self, format: _Format = _Format.JSON) -> str:
        """The IR as PopART serialises it (``Ir::serialise``): a JSON object with one entry
        per graph (``"maingraph"``, then each subgraph by id), the list of its ops in
        schedule order (type, name, inputs, outputs, attributes), the text ``logIr``
        logs.

        Raises:
            popart_exception: a format other than ``SerialiseFormat.JSON``.
        """
        from tremula.popxl._ir.ir_log import ir_json

        if format != _Format.JSON:
            raise PopartException(f"Ir::serialise: unsupported format {format!r} (JSON only)")
        return json.dumps(ir_json(self._ir))

    # ---- remote buffers ----
    def _remote_buffer(self, remoteBufferId: int, what: str) -> Any:
        for buf in self._ir._remote_buffers:
            if buf.remote_buffer_id == remoteBufferId:
                return buf
        raise PopartException(
            f"{what}: the Ir has no remote buffer with id {remoteBufferId} (its buffers: "
            f"{[b.remote_buffer_id for b in self._ir._remote_buffers]}; make one with "
            f"popxl.RemoteBuffer)"
        )

    def getRemoteBufferInfo(self, remoteBufferId: int) -> RemoteBufferInfo:
        """The slot type and number of slots (``repeats``) of a remote buffer."""
        buf = self._remote_buffer(remoteBufferId, "getRemoteBufferInfo")
        return RemoteBufferInfo(TensorInfo(buf.tensor_dtype, buf.tensor_shape), buf.entries)

    def setRemoteBufferInfo(self, remoteBufferId: int, info: RemoteBufferInfo) -> None:
        """Give a remote buffer (made by ``popxl.RemoteBuffer``) a new slot type and number
        of slots, as ``RemoteBuffer.set_remote_buffer_info`` does."""
        if not isinstance(info, RemoteBufferInfo):
            raise TypeError(
                f"setRemoteBufferInfo: expected a RemoteBufferInfo, got {type(info).__name__}"
            )
        buf = self._remote_buffer(remoteBufferId, "setRemoteBufferInfo")
        buf.set_remote_buffer_info(
            info.TensorInfo._dtype, tuple(info.TensorInfo.shape()), info.repeats
        )

    def getAllRemoteBufferInfos(self) -> dict[int, RemoteBufferInfo]:
        """Every remote buffer's info, by id."""
        return {
            b.remote_buffer_id: self.getRemoteBufferInfo(b.remote_buffer_id)
            for b in self._ir._remote_buffers
        }

    # ---- options and patterns ----
    def getDataFlow(self) -> DataFlowView:
        """The batches per step (``num_host_transfers``) and anchors (none)."""
        return DataFlowView(self._ir)

    def getSessionOptions(self) -> SessionOptions:
        return session_options(self._ir)

    def setPatterns(self, patterns: Patterns) -> None:
        if not isinstance(patterns, Patterns):
            raise TypeError(
                f"setPatterns: expected popart._internal.ir.patterns.Patterns, got "
                f"{type(patterns).__name__}"
            )
        _PATTERNS[self._ir] = patterns

    def getPatterns(self) -> Patterns:
        return _PATTERNS.get(self._ir) or Patterns(PatternsLevel.Default)

    def _own(self, graph: Any, what: str) -> None:
        g = getattr(graph, "_g", None)
        if g is None or g.ir is not self._ir:
            raise PopartException(f"{what}: {graph!r} is not a graph of this Ir")

    def applyTransform(self, transformId: int, graph: Graph) -> None:
        """Apply the transform of id ``transformId`` (``_ir.transforms.DecomposeSum.id()``,
        ``MergeExchange.id()``) to ``graph``, a graph of this Ir."""
        from tremula.popxl._ir.transforms import apply_transform

        self._own(graph, "applyTransform")
        apply_transform(transformId, graph)

    def applyPreAliasPatterns(self, graph: Graph) -> None:
        """Apply the enabled pre-alias patterns to ``graph``: Tremula's graphs hold no
        PopART gradient ops for them to rewrite, so the graph is left as it is."""
        self._own(graph, "applyPreAliasPatterns")

    def applyInplacePattern(self, graph: Graph) -> None:
        """Apply the inplace pattern to ``graph``: Tremula's lowering makes views of
        inputs itself, so the graph is left as it is."""
        self._own(graph, "applyInplacePattern")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ir) and other._ir is self._ir

    def __hash__(self) -> int:
        return id(self._ir)

    def __repr__(self) -> str:
        return f"popart._internal.ir.Ir({self._ir.id})"

    def __getattr__(self, name: str) -> Any:
        return unsupported_attr(self, name)


def ir_handle(ir: XlIr) -> Ir:
    """The binding handle of a popxl Ir (one per Ir)."""
    return view_of(ir, Ir)
