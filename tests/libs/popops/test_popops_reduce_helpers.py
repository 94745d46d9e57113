"""Helpers of the popops reduce / slicing / sort / iota / histogram tests: a small graph on
an IPU Model, inputs fed from NumPy, outputs read back, profiles validated on every run.

Other test files load this module by path (test directories are not packages)::

    spec = importlib.util.spec_from_file_location(NAME, Path(__file__).with_name(FILE))
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from tremula import poplar
from tremula.profile import validate


class Rig:
    """A device and a graph on it; inputs are variables written before each run."""

    def __init__(self, tiles: int = 16) -> None:
        self.device = poplar.IPUModel(tiles_per_ipu=tiles).create_device()
        self.graph = poplar.Graph(self.device.target)
        self.prog = poplar.Sequence()
        self.feeds: dict[str, np.ndarray] = {}
        self.engine: poplar.Engine | None = None

    def input(self, data: Any, dtype: poplar.Type | None = None, mapping: Any = "linear"):
        """A variable holding ``data`` (mapped linearly, on one tile, or by an array)."""
        data = np.asarray(data)
        dtype = dtype or poplar.as_type(data.dtype)
        name = f"in{len(self.feeds)}"
        t = self.graph.add_variable(dtype, data.shape, name)
        if isinstance(mapping, str):
            poplar.map_tensor_linearly(self.graph, t)
        else:
            self.graph.set_tile_mapping(t, mapping)
        self.graph.create_host_write(name, t)
        self.graph.create_host_read(name + "/read", t)
        self.feeds[name] = data.astype(dtype.numpy)
        return t

    def run(self, outputs: Sequence[poplar.Tensor] = ()) -> list[np.ndarray]:
        """Compile (once), write the inputs, run, validate the profiles, read ``outputs``."""
        if self.engine is None:
            self._names = []
            for i, t in enumerate(outputs):
                self.graph.create_host_read(f"out{i}", t)
                self._names.append(f"out{i}")
            self.engine = poplar.Engine(self.graph, self.prog)
            self.engine.load(self.device)
        for name, data in self.feeds.items():
            self.engine.write_tensor(name, data)
        self.engine.run(0)
        validate(self.engine.get_graph_profile(), self.engine.get_execution_profile())
        return [self.engine.read_tensor(n) for n in self._names]

    def read(self, t_index: int) -> np.ndarray:
        """The current value of input ``t_index`` (after the in-place operations)."""
        assert self.engine is not None
        return self.engine.read_tensor(f"in{t_index}/read")

    def compute_sets(self, prefix: str = "") -> list[str]:
        return [cs.name for cs in self.graph.state.compute_sets if cs.name.startswith(prefix)]


def validate_engine(engine: poplar.Engine) -> None:
    validate(engine.get_graph_profile(), engine.get_execution_profile())


def graph_size(graph: poplar.Graph) -> tuple[int, int, int, int]:
    """(variables, compute sets, vertices, generation): unchanged by a failed call."""
    st = graph.state
    return len(st.variables), len(st.compute_sets), st.num_vertices, st.generation


def load_module(name: str, filename: str) -> ModuleType:
    """Load a sibling test module by path under a unique name."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(filename))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
