"""Fixtures of the gcl tests: replicated graphs on a small IPU Model, per-replica inputs
written with ``engine.write_tensor``, ``[R, ...]`` outputs read back, validated profiles; and
NumPy references computed per group from the per-replica inputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tremula import poplar
from tremula.libs import gcl
from tremula.profile import validate


class Harness:
    """A replicated graph with host-written inputs and host-read outputs."""

    def __init__(self, replicas: int, tiles: int = 4) -> None:
        self.replicas = replicas
        self.device = poplar.IPUModel(tiles_per_ipu=tiles).create_device()
        self.graph = poplar.Graph(self.device.target, replication_factor=replicas)
        self.prog = poplar.Sequence()
        self.outputs: dict[str, poplar.Tensor] = {}
        self.engine: poplar.Engine | None = None

    def input(self, name: str, dtype: Any, shape: Any, tiles: Any = "linear") -> poplar.Tensor:
        """A variable written by the host (``tiles``: "linear" or an array of tiles)."""
        t = self.graph.add_variable(dtype, shape, name)
        if isinstance(tiles, str):
            poplar.map_tensor_linearly(self.graph, t)
        else:
            self.graph.set_tile_mapping(t, np.asarray(tiles).reshape(t.shape))
        self.graph.create_host_write(name, t)
        return t

    def output(self, name: str, t: poplar.Tensor) -> poplar.Tensor:
        self.graph.create_host_read(name, t)
        self.outputs[name] = t
        return t

    def run(self, data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Compile, load, write ``data`` (``[R, ...]`` per input), run program 0 once,
        validate the profiles and return every output as ``[R, ...]``."""
        engine = poplar.Engine(self.graph, self.prog)
        engine.load(self.device)
        for name, value in data.items():
            engine.write_tensor(name, value)
        engine.run(0)
        validate(engine.get_graph_profile(), engine.get_execution_profile())
        self.engine = engine
        R = self.replicas
        out = {}
        for name in self.outputs:
            value = engine.read_tensor(name)
            out[name] = value if R > 1 else value[None]
        return out


# ---- NumPy references, per group, from [R, ...] per-replica inputs ----

_REDUCE: dict[gcl.CollectiveOperator, Callable[[np.ndarray], np.ndarray]] = {
    gcl.CollectiveOperator.ADD: lambda m: m.sum(axis=1, dtype=m.dtype),
    gcl.CollectiveOperator.MEAN: lambda m: m.astype(np.float64).mean(axis=1),
    gcl.CollectiveOperator.MUL: lambda m: m.prod(axis=1, dtype=m.dtype),
    gcl.CollectiveOperator.MIN: lambda m: m.min(axis=1),
    gcl.CollectiveOperator.MAX: lambda m: m.max(axis=1),
    gcl.CollectiveOperator.LOGICAL_AND: lambda m: m.all(axis=1),
    gcl.CollectiveOperator.LOGICAL_OR: lambda m: m.any(axis=1),
    gcl.CollectiveOperator.SQUARE_ADD: lambda m: (m * m).sum(axis=1, dtype=m.dtype),
}


def grouping_of(R: int, group: Any) -> gcl.ReplicaGrouping:
    if group is None:
        return gcl.ReplicaGrouping.all(R)
    if isinstance(group, gcl.CommGroup):
        return group.to_grouping(R)
    return group


def ref_all_reduce(data: np.ndarray, group: Any, op: gcl.CollectiveOperator) -> np.ndarray:
    """``[R, ...]``: each replica's group reduction."""
    rg = grouping_of(data.shape[0], group)
    if op is gcl.CollectiveOperator.LOCAL:
        return data.copy()
    members = data[rg.group_matrix]  # [groups, G, ...]
    if data.dtype == np.float16:
        members = members.astype(np.float32)
    return _REDUCE[op](members)[rg.assignment_array]


def ref_reduce_scatter(data: np.ndarray, group: Any, op: gcl.CollectiveOperator) -> np.ndarray:
    """``[R, C]``: chunk ``index`` of the zero-padded flattened group reduction."""
    R = data.shape[0]
    rg = grouping_of(R, group)
    G = rg.group_size
    flat = data.reshape(R, -1)
    C = -(-flat.shape[1] // G)
    padded = np.zeros((R, G * C), dtype=flat.dtype)
    padded[:, : flat.shape[1]] = flat
    reduced = ref_all_reduce(padded, rg, op).reshape(R, G, C)
    return reduced[np.arange(R), rg.indices_in_group]


def ref_all_gather(data: np.ndarray, group: Any) -> np.ndarray:
    """``[R, G, ...]``: the values of the replica's group members, in index order."""
    rg = grouping_of(data.shape[0], group)
    return data[rg.group_matrix[rg.assignment_array]]


def ref_all_to_all(data: np.ndarray, group: Any) -> np.ndarray:
    """``[R, G, ...]``: row ``k`` of replica ``r`` is row ``index(r)`` of member ``k``."""
    rg = grouping_of(data.shape[0], group)
    members = rg.group_matrix[rg.assignment_array]  # [R, G]
    return data[members, rg.indices_in_group[:, None]]


def ref_broadcast(data: np.ndarray, group: Any, root: int) -> np.ndarray:
    rg = grouping_of(data.shape[0], group)
    return data[rg.group_matrix[rg.assignment_array, root]]


@pytest.fixture
def harness() -> Callable[..., Harness]:
    return Harness


@pytest.fixture(scope="session")
def ref() -> dict[str, Callable[..., np.ndarray]]:
    return {
        "all_reduce": ref_all_reduce,
        "reduce_scatter": ref_reduce_scatter,
        "all_gather": ref_all_gather,
        "all_to_all": ref_all_to_all,
        "broadcast": ref_broadcast,
    }
