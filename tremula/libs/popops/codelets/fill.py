"""popops::Fill: every element set to one value (``popops.fill`` / ``zero``).

Their cycle estimators are ``popops/estimators.py``'s.
"""

from __future__ import annotations

import numpy as np

from tremula import poplar
from tremula.libs.popops import estimators as E


class Fill(poplar.Codelet):
    """out[:] = value."""

    name = "popops::Fill"
    templates = ("T",)
    out = poplar.Output("T")
    value = poplar.State("T")

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        values = v.value
        out = v["out"]
        if values.size and bool(np.all((values == values[0]) | (values != values))):
            out[...] = values[0]  # one fill call: every vertex holds the same value
        else:
            out[...] = v.expand(values, "out")

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        return E.fill_cycles(v)
