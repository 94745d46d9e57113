"""popops::Histogram: per-vertex counts of values between levels (``popops.histogram``).

Their cycle estimators are ``popops/estimators.py``'s.
"""

from __future__ import annotations

import numpy as np

from tremula import poplar
from tremula.libs.popops import estimators as E


def _bins(x: np.ndarray, levels: np.ndarray, vertex: np.ndarray, V: int) -> np.ndarray:
    """Bin of every element of ``x`` ([replica, element]); ``levels`` is
    [replica, vertex * L] and ``vertex`` the vertex of each element."""
    R, L = x.shape[0], levels.shape[1] // max(V, 1)
    lv = levels.reshape(R, V, L)
    if L == 0:
        return np.zeros(x.shape, dtype=np.int64)
    if np.all(lv == lv[:1, :1]):  # one set of levels (the usual case): one search
        return np.searchsorted(lv[0, 0], x.reshape(-1), side="right").reshape(x.shape)
    xs = np.where(np.isnan(x), np.inf, x) if x.dtype.kind == "f" else x
    r = np.arange(R)[:, None]
    return (xs[:, :, None] >= lv[r, vertex[None, :]]).sum(axis=-1)


class Histogram(poplar.Codelet):
    """A partial histogram of ``data`` over ``levels`` (``len(levels) + 1`` counts)."""

    name = "popops::Histogram"
    templates = ("T",)
    data = poplar.Input("T")
    levels = poplar.Input("T")
    counts = poplar.Output(poplar.FLOAT)
    absolute = poplar.State(poplar.BOOL)

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        x = v.data
        if v.n and np.any(v.absolute):
            x = np.where(v.expand(v.absolute, "data"), np.abs(x), x)
        nb = v.lengths("counts").astype(np.int64)
        if v.n and not np.all(nb == nb[0]):
            raise ValueError("popops::Histogram: vertices of one compute set share the levels")
        B = int(nb[0]) if v.n else 1
        R = x.shape[0]
        vertex = v.segments("data")
        bins = _bins(x, v.levels, vertex, v.n)
        key = (np.arange(R)[:, None] * v.n + vertex[None, :]) * B + bins
        counts = np.bincount(key.reshape(-1), minlength=R * v.n * B)
        v.counts = counts.reshape(R, -1).astype(np.float32)

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        return E.histogram_cycles(v)
