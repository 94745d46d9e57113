"""popxl-addons' ``DecompressPacked4BitTensor`` vertex
(``group_quantize_decompress_codelet.cpp``) as a Tremula codelet, with its cycle estimator.

Each ``uint16`` input holds four 4-bit integers, most significant nibble first
(``[aaaa|bbbb|cccc|dddd]``); the vertex writes them as four ``half`` values
``a, b, c, d`` in ``[0, 16)``. (The C++ reinterprets the masked bits as half subnormals and
scales them back by ``2048 * 512`` / ``32768 * 512``: exact, so the values are the nibbles.)

Cycles: PopLibs' worker shape, ``overhead + n x cycles_per_element`` over the vertex's own
``n`` packed inputs, with Graphcore's figures from the op's ``setPerfEstimate`` (100
cycles of overhead, 30 per packed ``uint16``: "guess from godbolt per int32 + overhead").
The C++ charges every worker of a tile interval ``30 x`` the whole interval's length
(``i.size()``), six times what the worker converts; here each worker is charged its own
elements.
"""

from __future__ import annotations

import numpy as np

from tremula import poplar
from tremula.libs.util import worker_cycles

#: Graphcore's per-vertex estimate: 100 cycles + 30 per packed uint16 (one half4 out)
OVERHEAD = 100
CYCLES_PER_ELEMENT = 30
#: the four nibbles of a uint16, most significant first
SHIFTS = np.array([12, 8, 4, 0], dtype=np.uint16)


def unpack_nibbles(x: np.ndarray) -> np.ndarray:
    """``x[..., n]`` uint16 -> ``[..., 4 n]`` float16: each input's nibbles, high first."""
    x = np.asarray(x, dtype=np.uint16)
    nibbles = (x[..., None] >> SHIFTS) & np.uint16(15)
    return nibbles.reshape(*x.shape[:-1], x.shape[-1] * 4).astype(np.float16)


def decompress_cycles(v: poplar.VertexInfo) -> np.ndarray:
    """Context cycles of ``DecompressPacked4BitTensor`` vertices (module docstring)."""
    return worker_cycles(v.lengths("input"), 1, CYCLES_PER_ELEMENT, OVERHEAD)


class DecompressPacked4BitTensor(poplar.Codelet):
    """Four ``half`` values per packed ``uint16`` input (module docstring)."""

    name = "DecompressPacked4BitTensor"
    input = poplar.Input(poplar.UNSIGNED_SHORT)
    output = poplar.Output(poplar.HALF)

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        # each vertex's output is 4x its input, in order: the concatenations line up
        v.output = unpack_nibbles(v.input)

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        return decompress_cycles(v)


CODELETS = (DecompressPacked4BitTensor,)
