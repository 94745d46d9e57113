"""Fixtures of the poprand tests: build random tensors on a small IPU Model, run them and
validate the profiles."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tremula import poplar
from tremula.libs import poprand
from tremula.profile import validate

Build = Callable[[poplar.Graph, poplar.Tensor, poplar.Sequence], dict[str, poplar.Tensor]]


def run_random(
    build: Build,
    tiles: int = 4,
    replicas: int = 1,
    seed: Any = (1234, 5678),
    engine_out: list[poplar.Engine] | None = None,
) -> dict[str, np.ndarray]:
    """Build with ``build(graph, seed_tensor, prog)`` (a dict of output tensors), run once
    with ``seed`` written to the seed tensor, validate the profiles, return the outputs
    (with a leading replica axis when replicated)."""
    device = poplar.IPUModel(tiles_per_ipu=tiles).create_device()
    graph = poplar.Graph(device.target, replication_factor=replicas)
    seed_t = graph.add_variable(poplar.UNSIGNED_INT, (2,), "seed")
    graph.set_tile_mapping(seed_t, tiles - 1)
    graph.create_host_write("seed", seed_t)
    prog = poplar.Sequence()
    outs = build(graph, seed_t, prog)
    for key, t in outs.items():
        graph.create_host_read(key, t)
    engine = poplar.Engine(graph, prog)
    engine.load(device)
    engine.write_tensor("seed", np.asarray(seed, dtype=np.uint32))
    engine.run(0)
    validate(engine.get_graph_profile(), engine.get_execution_profile())
    if engine_out is not None:
        engine_out.append(engine)
    return {key: engine.read_tensor(key) for key in outs}


def mapped(
    graph: poplar.Graph, shape: Any, tiles: Any = "linear", dtype: Any = poplar.FLOAT
) -> poplar.Tensor:
    """A reference tensor mapped linearly, or by an array of tiles shaped like it."""
    t = graph.add_variable(dtype, shape, "reference")
    if isinstance(tiles, str):
        poplar.map_tensor_linearly(graph, t)
    else:
        graph.set_tile_mapping(t, np.asarray(tiles).reshape(t.shape))
    return t


@pytest.fixture(scope="session")
def run() -> Callable[..., dict[str, np.ndarray]]:
    return run_random


@pytest.fixture(scope="session")
def ref() -> Callable[..., poplar.Tensor]:
    return mapped


def _dropout(
    g: poplar.Graph, s: Any, m: int, r: poplar.Tensor, p: poplar.Sequence, **kw: Any
) -> poplar.Tensor:
    x = g.add_constant(poplar.FLOAT, r.shape, 1.5, "x")
    g.set_tile_mapping(x, 0)
    return poprand.dropout(g, s, m, x, r, 0.75, 2.0, p, **kw)


#: name -> f(graph, seed, seed_modifier, reference, prog, **kw): one call of each generator
GENERATORS: dict[str, Callable[..., poplar.Tensor]] = {
    "uniform": lambda g, s, m, r, p, **kw: poprand.uniform(g, s, m, r, "float", -1, 2, p, **kw),
    "uniform_half": lambda g, s, m, r, p, **kw: poprand.uniform(g, s, m, r, "half", 0, 1, p, **kw),
    "uniform_int": lambda g, s, m, r, p, **kw: poprand.uniform(
        g, s, m, r, "int", -5, 1000, p, **kw
    ),
    "log_uniform": lambda g, s, m, r, p, **kw: poprand.log_uniform(
        g, s, m, r, "float", 0.5, 8, p, **kw
    ),
    "normal": lambda g, s, m, r, p, **kw: poprand.normal(g, s, m, r, "float", 1, 3, p, **kw),
    "normal_half": lambda g, s, m, r, p, **kw: poprand.normal(g, s, m, r, "half", 0, 1, p, **kw),
    "truncated_normal": lambda g, s, m, r, p, **kw: poprand.truncated_normal(
        g, s, m, r, "float", 0, 1, 2, p, **kw
    ),
    "bernoulli": lambda g, s, m, r, p, **kw: poprand.bernoulli(g, s, m, r, "int", 0.4, p, **kw),
    "dropout": _dropout,
}


@pytest.fixture(scope="session")
def generators() -> dict[str, Callable[..., poplar.Tensor]]:
    return GENERATORS
