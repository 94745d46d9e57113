"""gcl's cycle estimators ([proposal]): popops' 2D worker shapes, in per-context cycles of
one worker vertex over ``n`` elements of vector width ``vw`` (float 2, half 4).

* ``gcl::SelectChunk``: ``20 + ceil(n / vw) x (1, or 2 with a pre-map)``.
* ``gcl::CombineChunk``: ``15 + ceil(n / vw) x cyclesPerVector`` of the operator (ADD/MUL 3,
  MIN/MAX 6, SQUARE_ADD 4, logical 7); integers ``15 + n x`` the operator's cycles per
  element (7 or 9).
* ``gcl::PlaceChunk``: ``20 + ceil(n / vw)``.

The per-operator cycles are the operator table's (``operators.COLLECTIVE_RULES``).
"""

from __future__ import annotations

import numpy as np

from tremula.libs.util import worker_cycles

MOVE_OVERHEAD = 20  # [proposal] select and place: pointers, chunk index, loop set-up
COMBINE_OVERHEAD = 15  # [proposal]


def select_chunk(n: np.ndarray, vw: int, pre_map: bool) -> np.ndarray:
    """A chunk copied out of the work buffer (through the operator's pre-map, if any)."""
    return worker_cycles(n, vw, 2 if pre_map else 1, MOVE_OVERHEAD)


def combine_chunk(
    n: np.ndarray, vw: int, integer: bool, cycles_per_vector: float, int_cycles: int
) -> np.ndarray:
    """A chunk combined with the accumulator (vectors for floats, elements for integers)."""
    if integer:
        return COMBINE_OVERHEAD + n * int_cycles
    return worker_cycles(n, vw, cycles_per_vector, COMBINE_OVERHEAD)


def place_chunk(n: np.ndarray, vw: int) -> np.ndarray:
    """A chunk copied into the work buffer."""
    return worker_cycles(n, vw, 1, MOVE_OVERHEAD)
