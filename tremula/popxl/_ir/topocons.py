"""``popart._internal.ir.TopoCons`` (``Graph.topoCons()``): a graph's topological
constraints, those of ``in_sequence`` and those made here. The graph's op order (what runs)
keeps to them: inserting a constraint moves ops later where needed, and one that would make
a cycle is refused. Tied constraints (PopART's ``tied``: the two ops must stay adjacent
through its transforms) are recorded as such (``getTiedBefores`` / ``getTiedAfters``);
Tremula runs no transform that could separate them."""

from __future__ import annotations

import weakref
from typing import Any

from tremula.errors import PopartException
from tremula.popxl._ir.unsupported import unsupported_attr
from tremula.popxl.graph import Graph as XlGraph

#: the tied constraints of each graph: {(id(before), id(after))}
_TIED: weakref.WeakKeyDictionary[XlGraph, set[tuple[int, int]]] = weakref.WeakKeyDictionary()


def _reachable(graphs: Any) -> set[int]:
    """The ids of ``graphs`` and of every graph their ops call, at any depth."""
    seen: set[int] = set()
    todo = list(graphs)
    while todo:
        g = todo.pop()
        if id(g) not in seen:
            seen.add(id(g))
            todo.extend(c for op in g._ops for c in op.called_graphs)
    return seen


class TopoCons:
    """A graph's topological constraints (``Graph.topocons``: those of ``in_sequence`` and
    those inserted here). The graph's op order (what runs) keeps to them."""

    def __init__(self, graph: XlGraph) -> None:
        self._g = graph

    def _tied(self) -> set[tuple[int, int]]:
        return _TIED.setdefault(self._g, set())

    def _check_op(self, op: Any, what: str) -> None:
        if getattr(op, "graph", None) is not self._g or not self._g._alive(op):
            raise PopartException(f"TopoCons.{what}: {op!r} is not an op of graph {self._g.name!r}")

    def transferToSubgraph(self, replacement: Any, ops_map: Any, transferTied: bool = True) -> None:
        """Move the constraints of ops moved into ``replacement``'s called graphs (``ops_map``:
        original op -> its copies there) onto ``replacement``: an op constrained before or
        after a moved op is constrained before or after ``replacement``. (The copies keep
        the originals' order inside the called graph.)"""
        if getattr(replacement, "graph", None) is not self._g:
            raise PopartException(
                f"transferToSubgraph: {replacement!r} is not an op of graph {self._g.name!r}"
            )
        called = _reachable(replacement.called_graphs)  # a loop's body is inside its wrapper
        moved = []
        for original, copies in dict(ops_map).items():
            if original.graph is not self._g:
                raise PopartException(f"transferToSubgraph: {original!r} is not in this graph")
            for c in copies:
                if id(c.graph) not in called:
                    raise PopartException(
                        f"transferToSubgraph: {c!r} is not in a graph {replacement!r} calls"
                    )
            moved.append(original)
        self._g._replace_ops(moved, replacement)

    def _pairs(self) -> list[tuple[Any, Any]]:
        return self._g.topocons()

    def contains(self, before: Any, after: Any) -> bool:
        """Whether a constraint of the graph puts ``before`` directly before ``after``, as
        PopART's ``TopoCons::contains`` answers (a chain of constraints through other ops
        does not count: ``in_sequence`` constrains each op after the one made before it)."""
        return any(b is before and a is after for b, a in self._pairs())

    def insert(self, before: Any, after: Any, tied: bool = False) -> None:
        """Constrain ``before`` to run before ``after`` (moving ``after`` and what depends
        on it later in the graph's order where needed); ``tied`` marks the constraint tied.

        Raises:
            PopartException: an op is not in this graph, or the constraint would make a
                cycle (``after`` already runs before ``before`` by data or constraints).
        """
        from tremula.popxl._ir.graph import restore_order

        for op in (before, after):
            self._check_op(op, "insert")
        entry = self._g._topo_before.get(id(after))
        known = entry is not None and any(b is before for b in entry[1])
        self._g._add_topocon(before, after)
        try:
            restore_order(self._g)
        except PopartException:
            if not known:
                self._drop(before, after)
            raise PopartException(
                f"TopoCons.insert: {before.debugName()} cannot run before "
                f"{after.debugName()} in graph {self._g.name!r}: that makes a cycle"
            ) from None
        if tied and before is not after:
            self._tied().add((id(before), id(after)))

    def _drop(self, before: Any, after: Any) -> None:
        entry = self._g._topo_before.get(id(after))
        if entry is not None:
            entry[1][:] = [b for b in entry[1] if b is not before]
        self._tied().discard((id(before), id(after)))

    def remove(self, *ops: Any) -> None:
        """``remove(before, after)`` removes that constraint; ``remove(op)`` every
        constraint ``op`` has, before or after other ops."""
        if len(ops) == 2:
            self._drop(*ops)
            return
        (op,) = ops
        for b, a in self._pairs():
            if op is a or op is b:
                self._drop(b, a)
        self._g._topo_before.pop(id(op), None)

    def hasConstraint(self, op: Any) -> bool:
        """Whether ``op`` is constrained before or after some op."""
        return any(op is b or op is a for b, a in self._pairs())

    def getBefores(self, op: Any) -> list[Any]:
        """The ops ``op`` is directly constrained to follow."""
        return [b for b, a in self._pairs() if a is op]

    def getAfters(self, op: Any) -> list[Any]:
        """The ops directly constrained to follow ``op``."""
        return [a for b, a in self._pairs() if b is op]

    def getTiedBefores(self, op: Any) -> list[Any]:
        """The ops ``op`` is constrained to follow by tied constraints."""
        tied = self._tied()
        return [b for b in self.getBefores(op) if (id(b), id(op)) in tied]

    def getTiedAfters(self, op: Any) -> list[Any]:
        """The ops constrained to follow ``op`` by tied constraints."""
        tied = self._tied()
        return [a for a in self.getAfters(op) if (id(op), id(a)) in tied]

    def transfer(self, beforeTransfer: Any, afterTransfer: Any, removeOld: bool = True) -> None:
        """Give ``afterTransfer`` the constraints of ``beforeTransfer`` (each op before it
        comes before ``afterTransfer``, each op after it after ``afterTransfer``, tied ones
        tied), removing ``beforeTransfer``'s if ``removeOld``."""
        self.transferToMultiple(beforeTransfer, [afterTransfer], removeOld)

    def transferToMultiple(
        self, beforeTransfer: Any, afterTransfer: list[Any], removeOld: bool = True
    ) -> None:
        """Give every op of ``afterTransfer`` the constraints of ``beforeTransfer`` (see
        :meth:`transfer`), then remove ``beforeTransfer``'s.

        Raises:
            PopartException: an op is not in this graph, or a constraint would make a cycle
                (the constraints are then as they were).
        """
        for op in (beforeTransfer, *afterTransfer):
            self._check_op(op, "transfer")
        tied = set(self._tied())
        befores = [
            (b, (id(b), id(beforeTransfer)) in tied) for b in self.getBefores(beforeTransfer)
        ]
        afters = [(a, (id(beforeTransfer), id(a)) in tied) for a in self.getAfters(beforeTransfer)]
        snapshot = {k: (a, list(bs)) for k, (a, bs) in self._g._topo_before.items()}
        try:
            for new in afterTransfer:
                for b, is_tied in befores:
                    if b is not new:
                        self.insert(b, new, is_tied)
                for a, is_tied in afters:
                    if a is not new:
                        self.insert(new, a, is_tied)
        except PopartException:
            self._g._topo_before.clear()
            self._g._topo_before.update(snapshot)
            _TIED[self._g] = tied
            raise
        if removeOld:
            self.remove(beforeTransfer)

    def __getattr__(self, name: str) -> Any:
        return unsupported_attr(self, name)
