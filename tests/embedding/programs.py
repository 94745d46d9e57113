"""PopXL programs that look a host embedding up and train it, and their NumPy references.

A program looks ``indices`` up in a subgraph (``emb.lookup``), stores the rows to the host,
and, when it trains, calls the grad graph ``autodiff`` made of the subgraph with gradients
streamed from the host: one run is one step (lookup, then update).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import popxl
import popxl.ops as ops
from tremula.embedding import HostEmbedding
from tremula.profile import check_execution_profile, check_graph_profile


@dataclass
class Program:
    session: popxl.Session
    indices: Any
    rows: Any
    grads: Any | None
    replicas: int

    def run(self, indices: np.ndarray, grads: np.ndarray | None = None) -> np.ndarray:
        """One step; ``indices`` ``[R, *shape]`` (no replica axis when ``R == 1``)."""
        inputs = {self.indices: indices}
        if self.grads is not None:
            inputs[self.grads] = grads
        return self.session.run(inputs)[self.rows]

    def check_profiles(self) -> None:
        engine = self.session.engine
        check_graph_profile(engine.get_graph_profile())
        check_execution_profile(engine.get_execution_profile())


def build(
    emb: HostEmbedding,
    shape: tuple[int, ...],
    replicas: int = 1,
    device: str | None = None,
    train: bool = True,
    lookups: int = 1,
    grads_required: str = "default",
    **lookup_args: Any,
) -> Program:
    """A program of one step over indices of ``shape`` (per replica). ``lookups`` looks the
    same indices up that many times (the rows summed). ``grads_required="none"`` asks
    autodiff for no gradient at all (the update must still happen)."""
    device = device or ("cpu" if replicas == 1 else "ipu_model")
    ir = popxl.Ir(replication=replicas)
    e = emb.shape[1]
    with ir.main_graph:
        si = popxl.h2d_stream(shape, popxl.int32, "indices")
        so = popxl.d2h_stream((*shape, e), emb.dtype, "rows")
        idx = ops.host_load(si)

        def forward(i: popxl.Tensor) -> popxl.Tensor:
            out = emb.lookup(i, **lookup_args)
            for _ in range(lookups - 1):
                out = out + emb.lookup(i, **lookup_args)
            return out

        fwd = ir.create_graph(forward, idx)
        site = ops.call_with_info(fwd, idx)
        ops.host_store(so, site.outputs[0])
        sg = None
        if train:
            required = [] if grads_required == "none" else None
            info = popxl.transforms.autodiff(fwd, grads_required=required)
            sg = popxl.h2d_stream((*shape, e), emb.dtype, "grads")
            ops.call(info.graph, ops.host_load(sg), inputs_dict=info.inputs_dict(site))
    return Program(popxl.Session(ir, device), si, so, sg, replicas)


def dyadic(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    """Values whose sums are exact in any order (multiples of 1/8 of a few units)."""
    return (rng.integers(-16, 17, shape) / 8).astype(dtype)


def reference_step(
    table: np.ndarray, indices: np.ndarray, grads: np.ndarray, lr: float, clip: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """(rows looked up, the table after SGD): ``row -= lr * (sum of its gradients)``, the
    repeats (over replicas too) summed in order with ``np.add.at``."""
    t, e = table.shape
    idx = np.clip(indices, 0, t - 1) if clip else indices
    rows = table[idx]
    acc = np.zeros(table.shape, np.float32)
    np.add.at(acc, idx.reshape(-1), grads.reshape(-1, e).astype(np.float32))
    return rows, (table + np.float32(-lr) * acc).astype(table.dtype)


def gradient_sum(table: np.ndarray, indices: np.ndarray, grads: np.ndarray) -> np.ndarray:
    """``acc[i]`` = the sum of the gradients of row ``i`` (``np.add.at``, in order)."""
    acc = np.zeros(table.shape, np.float32)
    idx = np.clip(indices, 0, table.shape[0] - 1).reshape(-1)
    np.add.at(acc, idx, grads.reshape(-1, table.shape[1]).astype(np.float32))
    return acc
