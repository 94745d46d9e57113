"""Fixtures of the poplin tests: a harness that builds a graph on a small IPU Model, runs a
program with host writes and reads, and validates the profiles of every engine it ran."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from tremula import poplar
from tremula.profile import validate


@dataclass
class Session:
    """A graph, a program to append to, and the device they run on."""

    device: poplar.Device
    graph: poplar.Graph
    prog: poplar.Sequence = field(default_factory=poplar.Sequence)
    engine: poplar.Engine | None = None

    def run(
        self,
        writes: Mapping[str, tuple[poplar.Tensor, Any]],
        reads: Mapping[str, poplar.Tensor],
    ) -> dict[str, np.ndarray]:
        """Compile, load, write the inputs, run once, validate the profiles, read."""
        g = self.graph
        for name, (t, _) in writes.items():
            g.create_host_write(name, t)
        for name, t in reads.items():
            g.create_host_read("read_" + name, t)
        self.engine = poplar.Engine(g, self.prog)
        self.engine.load(self.device)
        for name, (_, data) in writes.items():
            self.engine.write_tensor(name, data)
        self.engine.run()
        validate(self.engine.get_graph_profile(), self.engine.get_execution_profile())
        return {name: self.engine.read_tensor("read_" + name) for name in reads}

    @property
    def cycles(self) -> int:
        assert self.engine is not None
        return int(self.engine.get_execution_profile()["simulation"]["cycles"])


@pytest.fixture
def session():
    """``session(tiles=16, version="ipu2", **target)`` -> a new :class:`Session`."""

    def make(tiles: int = 16, version: str = "ipu2", replicas: int = 1, **params) -> Session:
        device = poplar.IPUModel(version, tiles_per_ipu=tiles, **params).create_device()
        return Session(device, poplar.Graph(device.target, replication_factor=replicas))

    return make


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` in float64 (ints exactly in int64)."""
    if a.dtype.kind in "iu":
        return a.astype(np.int64) @ b.astype(np.int64)
    return a.astype(np.float64) @ b.astype(np.float64)


def assert_matmul_close(
    got: np.ndarray, a: np.ndarray, b: np.ndarray, out_dtype: np.dtype, extra: Any = 0.0
) -> None:
    """``got`` equals ``a @ b (+ extra)`` within the rounding of the types involved: exact
    for ints; for floats relative to ``|a| @ |b|`` (the bound of summation error)."""
    want = reference(a, b) + extra
    if np.dtype(out_dtype).kind in "iu":
        np.testing.assert_array_equal(got, want.astype(out_dtype))
        return
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)) + np.abs(extra)
    eps = np.finfo(out_dtype).eps if np.dtype(out_dtype) == np.float16 else 1e-6
    assert got.dtype == out_dtype
    np.testing.assert_array_less(np.abs(got - want), 2 * eps * scale + 1e-30)


@pytest.fixture
def close():
    """The :func:`assert_matmul_close` check."""
    return assert_matmul_close
