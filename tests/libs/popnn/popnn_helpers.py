"""Helpers of the popnn tests: a small graph on an IPU Model fed from NumPy (profiles
validated on every run), NumPy references of popnn's functions computed in float64, and a
central finite-difference gradient.

Test files load this module by path (test directories are not packages)::

    H = load_helpers(__file__)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from tremula_tests_evaluator import finite_difference

from tremula import poplar
from tremula.profile import validate


class Rig:
    """A device and a graph on it; inputs are variables written before each run."""

    def __init__(self, tiles: int = 4) -> None:
        self.device = poplar.IPUModel(tiles_per_ipu=tiles).create_device()
        self.graph = poplar.Graph(self.device.target)
        self.prog = poplar.Sequence()
        self.feeds: dict[str, np.ndarray] = {}
        self.engine: poplar.Engine | None = None

    def input(self, data: Any, dtype: Any = None, mapping: Any = "linear") -> poplar.Tensor:
        """A variable holding ``data`` (mapped linearly, to one tile, or by an array)."""
        data = np.asarray(data)
        dtype = poplar.as_type(dtype or data.dtype)
        name = f"in{len(self.feeds)}"
        t = self.graph.add_variable(dtype, data.shape, name)
        if isinstance(mapping, str) and mapping == "linear":
            poplar.map_tensor_linearly(self.graph, t)
        elif isinstance(mapping, (int, np.integer)):
            self.graph.set_tile_mapping(t, int(mapping))
        else:
            self.graph.set_tile_mapping(t, np.asarray(mapping).reshape(t.shape))
        self.graph.create_host_write(name, t)
        self.feeds[name] = data.astype(dtype.numpy)
        return t

    def feed(self, t: poplar.Tensor, data: Any) -> None:
        """Write ``data`` into an existing variable ``t`` before each run."""
        name = f"in{len(self.feeds)}"
        self.graph.create_host_write(name, t)
        self.feeds[name] = np.asarray(data).astype(t.dtype.numpy)

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


def graph_size(graph: poplar.Graph) -> tuple[int, int, int, int]:
    """(variables, compute sets, vertices, generation): unchanged by a failed call."""
    st = graph.state
    return len(st.variables), len(st.compute_sets), st.num_vertices, st.generation


def cs_estimates(engine: poplar.Engine, prefix: str) -> tuple[np.ndarray, dict[str, int]]:
    """(cyclesByTile, activeCyclesByVertexType by name) of the first compute set whose
    name starts with ``prefix``."""
    gp = engine.get_graph_profile()
    cs = gp["computeSets"]
    i = next(k for k, n in enumerate(cs["names"]) if n.startswith(prefix))
    est = cs["cycleEstimates"]
    names = gp["vertexTypes"]["names"]
    row = est["activeCyclesByVertexType"][i]
    by_type = {names[t]: int(row[t]) for t in range(len(names)) if row[t]}
    return np.asarray(est["cyclesByTile"][i]), by_type


#: central differences of a scalar function of one array: the suite's one helper
finite_diff = finite_difference


# ---- NumPy references (float64) ----


def erf(x: np.ndarray) -> np.ndarray:
    from math import erf as _erf

    return np.vectorize(_erf)(np.asarray(x, dtype=np.float64))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1 + np.tanh(0.5 * x))


K = np.sqrt(2 / np.pi)

#: name -> (f, f' as a function of the input)
NONLINEARITIES: dict[str, tuple[Callable, Callable]] = {
    "SIGMOID": (sigmoid, lambda x: sigmoid(x) * (1 - sigmoid(x))),
    "RELU": (lambda x: np.maximum(x, 0), lambda x: (x > 0).astype(float)),
    "TANH": (np.tanh, lambda x: 1 - np.tanh(x) ** 2),
    "GELU": (
        lambda x: 0.5 * x * (1 + np.tanh(K * (x + 0.044715 * x**3))),
        lambda x: (
            0.5 * (1 + np.tanh(K * (x + 0.044715 * x**3)))
            + 0.5
            * x
            * (1 - np.tanh(K * (x + 0.044715 * x**3)) ** 2)
            * K
            * (1 + 3 * 0.044715 * x**2)
        ),
    ),
    "GELU_ERF": (
        lambda x: 0.5 * x * (1 + erf(x / np.sqrt(2))),
        lambda x: 0.5 * (1 + erf(x / np.sqrt(2))) + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi),
    ),
    "SWISH": (lambda x: x * sigmoid(x), lambda x: sigmoid(x) * (1 + x * (1 - sigmoid(x)))),
    "HARD_SIGMOID": (
        lambda x: np.clip(0.2 * x + 0.5, 0, 1),
        lambda x: np.where(np.abs(x) < 2.5, 0.2, 0.0),
    ),
}
FROM_INPUT = ("GELU", "GELU_ERF", "SWISH", "HARD_SIGMOID")


def softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def softmax_grad(y: np.ndarray, g: np.ndarray) -> np.ndarray:
    return y * (g - (g * y).sum(-1, keepdims=True))


def log_softmax_grad(y: np.ndarray, g: np.ndarray) -> np.ndarray:
    return g - np.exp(y) * g.sum(-1, keepdims=True)


def one_hot(labels: np.ndarray, classes: int) -> np.ndarray:
    lab = np.asarray(labels).astype(np.int64)
    valid = (lab >= 0) & (lab < classes)
    return ((np.arange(classes) == lab[:, None]) & valid[:, None]).astype(np.float64)


def stat_index(shape: tuple[int, ...], kind: str, groups: int = 1, strided: bool = True):
    """The statistic each element of ``[B, C, *F]`` belongs to: ``group`` (index
    ``b * G + g``), ``layer`` (``b``) or ``batch`` (``c``)."""
    b, c = shape[:2]
    bi = np.arange(b).reshape((b, 1) + (1,) * (len(shape) - 2))
    ci = np.arange(c).reshape((1, c) + (1,) * (len(shape) - 2))
    if kind == "batch":
        idx = ci + 0 * bi
    elif kind == "layer":
        idx = bi + 0 * ci
    else:
        grp = ci % groups if strided else ci // (c // groups)
        idx = bi * groups + grp
    return np.broadcast_to(idx, shape)


def norm_ref(x, idx, gamma, beta, eps, dy, unbiased=False):
    """Float64 reference of a normalisation whose statistics are indexed by ``idx``:
    a dict of mean, inv_std, out, whitened, dx, gamma_delta, beta_delta."""
    x = np.asarray(x, dtype=np.float64)
    dy = np.asarray(dy, dtype=np.float64)
    flat = idx.ravel()
    n = np.bincount(flat)
    mean = np.bincount(flat, x.ravel()) / n
    centred = x - mean[idx]
    var = np.bincount(flat, (centred * centred).ravel()) / (n - 1 if unbiased else n)
    inv = 1 / np.sqrt(var + eps)
    xh = centred * inv[idx]
    cshape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    c = x.shape[1]
    gam = np.broadcast_to(gamma, (c,)).reshape(cshape)
    bet = np.broadcast_to(beta, (c,)).reshape(cshape)
    g = dy * gam
    mg = np.bincount(flat, g.ravel()) / n
    mgx = np.bincount(flat, (g * xh).ravel()) / n
    axes = (0, *range(2, x.ndim))
    return {
        "mean": mean,
        "inv_std": inv,
        "out": xh * gam + bet,
        "whitened": xh,
        "dx": inv[idx] * (g - mg[idx] - xh * mgx[idx]),
        "gamma_delta": (dy * xh).sum(axis=axes),
        "beta_delta": dy.sum(axis=axes),
    }


def gru_ref(x, h0, wi, wo, b):
    """GRU outputs ``[T, B, H]`` (reset, update, candidate; reset before the matmul)."""
    h, hs = h0, []
    for t in range(x.shape[0]):
        r = sigmoid(x[t] @ wi[0] + h @ wo[0] + b[0])
        u = sigmoid(x[t] @ wi[1] + h @ wo[1] + b[1])
        c = np.tanh(x[t] @ wi[2] + (r * h) @ wo[2] + b[2])
        h = u * h + (1 - u) * c
        hs.append(h)
    return np.stack(hs)


def lstm_ref(x, h0, c0, wi, wo, b):
    """LSTM (outputs ``[T, B, H]``, final cell state); gates forget, input, cand, output."""
    h, c, hs = h0, c0, []
    for t in range(x.shape[0]):
        z = [x[t] @ wi[k] + h @ wo[k] + b[k] for k in range(4)]
        f, i, g, o = sigmoid(z[0]), sigmoid(z[1]), np.tanh(z[2]), sigmoid(z[3])
        c = f * c + i * g
        h = o * np.tanh(c)
        hs.append(h)
    return np.stack(hs), c
