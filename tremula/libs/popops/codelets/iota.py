"""popops::Iota: consecutive integers (``popops.iota``).

Their cycle estimators are ``popops/estimators.py``'s.
"""

from __future__ import annotations

import numpy as np

from tremula import poplar
from tremula.libs.popops import estimators as E


class Iota(poplar.Codelet):
    """``out[i] = first + i``."""

    name = "popops::Iota"
    templates = ("T",)
    out = poplar.Output("T")
    first = poplar.State("T")

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        offsets = v.offsets("out")[:-1]
        step = np.arange(v.out.shape[1], dtype=np.int64) - v.expand(offsets, "out")
        values = v.expand(v.first.astype(np.int64), "out") + step
        v.out = values.astype(v.out.dtype)[None, :]

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        return E.iota_cycles(v)
