"""Small codelets and helpers shared by the engine tests.

Loaded by ``conftest.py`` under the unique module name ``tremula_tests_engine_codelets`` so
that it cannot collide with a helper module of another test directory. Every engine built
with :func:`make_engine` is remembered, so that ``conftest.py`` can validate the profiles of
every engine a test produced.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tremula import poplar


class Scale(poplar.Codelet):
    """y = a * x (a worker codelet)."""

    x = poplar.Input("T")
    y = poplar.Output("T")
    a = poplar.State(poplar.FLOAT)
    templates = ("T",)

    @staticmethod
    def compute(v):
        v.y = v.expand(v.a, "x") * v.x

    @staticmethod
    def cycles(v):
        return 20 + 3 * np.ceil(v.lengths("x") / v.vector_width("x"))


class Add(poplar.Codelet):
    """out = a + b."""

    a = poplar.Input("T")
    b = poplar.Input("T")
    out = poplar.Output("T")
    templates = ("T",)

    @staticmethod
    def compute(v):
        v.out = v.a + v.b


class Increment(poplar.Codelet):
    """x += by, in place."""

    x = poplar.InOut("T")
    by = poplar.State(poplar.INT, default=1)
    templates = ("T",)

    @staticmethod
    def compute(v):
        v.x = v.x + v.expand(v.by, "x").astype(v.x.dtype)


class Sum(poplar.Codelet):
    """out = sum(x): one scalar per vertex."""

    x = poplar.Input("T")
    out = poplar.Output("T", kind="scalar")
    templates = ("T",)

    @staticmethod
    def compute(v):
        v.out = v.reduce(np.add, v.x, "x")


class ListSum(poplar.Codelet):
    """out = the sum of every element of a list of vectors."""

    xs = poplar.Input("T", kind="vector_list")
    out = poplar.Output("T", kind="scalar")
    templates = ("T",)

    @staticmethod
    def compute(v):
        v.out = v.reduce(np.add, v.xs, "xs")


class LessThan(poplar.Codelet):
    """out = x < limit (a loop predicate)."""

    x = poplar.Input(poplar.INT, kind="scalar")
    out = poplar.Output(poplar.BOOL, kind="scalar")
    limit = poplar.State(poplar.INT)

    @staticmethod
    def compute(v):
        v.out = v.x < v.limit


class SupScale(poplar.Codelet):
    """y = a * x, as a supervisor vertex."""

    x = poplar.Input("T")
    y = poplar.Output("T")
    a = poplar.State(poplar.FLOAT)
    templates = ("T",)
    supervisor = True

    @staticmethod
    def compute(v):
        v.y = v.expand(v.a, "x") * v.x

    @staticmethod
    def cycles(v):
        return 100 + v.lengths("x")


class Fixed(poplar.Codelet):
    """Does nothing to x, but costs exactly ``c`` cycles (per context)."""

    x = poplar.InOut(poplar.FLOAT)
    c = poplar.State(poplar.INT)

    @staticmethod
    def compute(v):
        v.x = v.x

    @staticmethod
    def cycles(v):
        return v.c


class FixedSup(poplar.Codelet):
    """Supervisor version of :class:`Fixed`."""

    x = poplar.InOut(poplar.FLOAT)
    c = poplar.State(poplar.INT)
    supervisor = True

    @staticmethod
    def compute(v):
        v.x = v.x

    @staticmethod
    def cycles(v):
        return v.c


CODELETS = [Scale, Add, Increment, Sum, ListSum, LessThan, SupScale, Fixed, FixedSup]

#: every engine made by make_engine since the last reset (see conftest.py)
ENGINES: list[poplar.Engine] = []


def new_graph(
    tiles: int = 4, replicas: int = 1, **params: Any
) -> tuple[poplar.Graph, poplar.Device]:
    """A graph with the test codelets on a small IPU Model, and its device."""
    device = poplar.IPUModel(tiles_per_ipu=tiles, **params).create_device()
    graph = poplar.Graph(device.target, replication_factor=replicas)
    graph.add_codelets(CODELETS)
    return graph, device


def var(
    graph: poplar.Graph,
    shape: Any,
    tile: int | None = 0,
    dtype: Any = poplar.FLOAT,
    name: str = "",
    **handles: str,
) -> poplar.Tensor:
    """A variable on one tile (or mapped linearly when ``tile`` is None), with optional
    ``write=`` / ``read=`` host handles."""
    t = graph.add_variable(dtype, shape, name)
    if tile is None:
        poplar.map_tensor_linearly(graph, t)
    else:
        graph.set_tile_mapping(t, tile)
    if "write" in handles:
        graph.create_host_write(handles["write"], t)
    if "read" in handles:
        graph.create_host_read(handles["read"], t)
    return t


def const(
    graph: poplar.Graph, value: Any, tile: int = 0, dtype: Any = poplar.FLOAT, name: str = ""
) -> poplar.Tensor:
    value = np.asarray(value)
    t = graph.add_constant(dtype, value.shape, value, name)
    graph.set_tile_mapping(t, tile)
    return t


def execute(
    graph: poplar.Graph, vertex_type: str, fields: dict[str, Any], tile: int = 0, name: str = ""
) -> poplar.Execute:
    """A program executing one vertex in a new compute set."""
    cs = graph.add_compute_set(name)
    graph.add_vertex(cs, vertex_type, fields, tile=tile)
    return poplar.Execute(cs)


def increment(
    graph: poplar.Graph, t: poplar.Tensor, by: int = 1, tile: int = 0, name: str = ""
) -> poplar.Execute:
    return execute(graph, f"Increment<{t.dtype}>", {"x": t.flatten(), "by": by}, tile, name)


def make_engine(
    graph: poplar.Graph,
    programs: Any,
    options: dict[str, Any] | None = None,
    device: poplar.Device | None = None,
) -> poplar.Engine:
    """An engine, loaded on ``device`` when one is given, remembered in :data:`ENGINES`."""
    engine = poplar.Engine(graph, programs, options)
    ENGINES.append(engine)
    if device is not None:
        engine.load(device)
    return engine
