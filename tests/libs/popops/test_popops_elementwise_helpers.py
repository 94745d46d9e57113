"""Helpers of the popops element-wise tests: build a small graph, run a program, read the
results, and validate the profiles of every engine run.

Other test files load this module by path (``load_helpers()`` below is copied there in
three lines), since test directories are not packages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tremula import poplar
from tremula.profile import validate


@dataclass
class Rig:
    """A device and a graph on it, with host handles added on demand."""

    tiles: int = 4
    device: poplar.Device = field(init=False)
    graph: poplar.Graph = field(init=False)
    prog: poplar.Sequence = field(default_factory=poplar.Sequence)
    feeds: dict[str, np.ndarray] = field(default_factory=dict)
    reads: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.device = poplar.IPUModel(tiles_per_ipu=self.tiles).create_device()
        self.graph = poplar.Graph(self.device.target)

    def input(
        self, data: np.ndarray, dtype: poplar.Type | None = None, mapping: str = "linear"
    ) -> poplar.Tensor:
        """A variable holding ``data`` when the program runs (mapped linearly, or on tile
        ``int(mapping)``)."""
        data = np.asarray(data)
        dtype = dtype or poplar.as_type(data.dtype)
        name = f"in{len(self.feeds)}"
        t = self.graph.add_variable(dtype, data.shape, name)
        if mapping == "linear":
            poplar.map_tensor_linearly(self.graph, t)
        else:
            self.graph.set_tile_mapping(t, int(mapping))
        self.graph.create_host_write(name, t)
        self.feeds[name] = data.astype(dtype.numpy)
        return t

    def output(self, t: poplar.Tensor) -> str:
        name = f"out{len(self.reads)}"
        self.graph.create_host_read(name, t)
        self.reads.append(name)
        return name

    def run(self, outputs: Sequence[poplar.Tensor]) -> tuple[list[np.ndarray], poplar.Engine]:
        """Compile, run once, validate the profiles; the values of ``outputs``."""
        names = [self.output(t) for t in outputs]
        engine = poplar.Engine(self.graph, self.prog)
        engine.load(self.device)
        for name, data in self.feeds.items():
            engine.write_tensor(name, data)
        engine.run()
        validate(engine.get_graph_profile(), engine.get_execution_profile())
        return [engine.read_tensor(n) for n in names], engine


def cs_estimates(engine: poplar.Engine, cs_name: str) -> tuple[np.ndarray, dict[str, int]]:
    """(cyclesByTile, activeCyclesByVertexType by type name) of the compute set named
    ``cs_name`` in the graph profile."""
    gp = engine.get_graph_profile()
    cs = gp["computeSets"]
    i = cs["names"].index(cs_name)
    est = cs["cycleEstimates"]
    names = gp["vertexTypes"]["names"]
    by_type = {
        names[t]: int(est["activeCyclesByVertexType"][i][t])
        for t in range(len(names))
        if est["activeCyclesByVertexType"][i][t]
    }
    return np.asarray(est["cyclesByTile"][i]), by_type


def test_rig_round_trip() -> None:
    rig = Rig()
    x = rig.input(np.arange(5, dtype=np.float32))
    (value,), _ = rig.run([x])
    np.testing.assert_array_equal(value, np.arange(5))
