"""popnn's cycle estimators, in per-context cycles of one worker vertex (``n`` elements,
``vw`` the 64-bit vector width: float 2, half 4). All popnn codelets are worker vertices (at
most six per tile), like popops' element-wise codelets: the tile's cycles are 6 x its
busiest context plus the compute-set launch, which stands for PopLibs' supervisor overhead.

* ``popnn::NonLinearity1D<T,NL>`` (in place): ``20 + ceil(n / vw) x (cpv + 4)``, ``cpv``
  the non-linearity table's forward cycles per vector (``nonlinearity_table``).
* ``popnn::NonLinearityGrad1D<T,NL>``: ``29 + ceil(n / vw) x (cpv + 5)``, ``cpv`` the
  table's gradient cycles (the derivative and the product with the incoming gradient).
* ``popnn::Loss<KIND>Rows<T,L>`` over ``r`` rows of ``C`` classes [proposal]:
  ``30 + r x (row + ceil(C / vw) x cpv)``: per row the label check, the scale and (for the
  logarithmic losses) one log or exp of the label's element; per vector the deltas
  (``LOSS_CYCLES``: ``cpv`` 4 for cross entropy, 6 for sum squared, 10 for NLL, which takes
  an exp per element).
"""

from __future__ import annotations

import numpy as np

from tremula.libs.util import worker_cycles

#: loss kind -> (cycles per row, cycles per vector of a row)
LOSS_CYCLES: dict[str, tuple[int, int]] = {
    "CrossEntropy": (40, 4),
    "SumSquared": (12, 6),
    "NllLog": (14, 10),
    "Nll": (34, 4),  # [proposal] one log per row, a scale and subtract a vector
}


def nonlinearity(n: np.ndarray, vw: int, cycles_per_vector: float) -> np.ndarray:
    """The forward non-linearity in place."""
    return worker_cycles(n, vw, cycles_per_vector + 4, 20)


def nonlinearity_grad(n: np.ndarray, vw: int, cycles_per_vector: float) -> np.ndarray:
    """The gradient of a non-linearity times the incoming gradient."""
    return worker_cycles(n, vw, cycles_per_vector + 5, 29)


def loss_rows(kind: str, rows: np.ndarray, classes: np.ndarray, vw: int) -> np.ndarray:
    """A fused loss vertex over ``rows`` whole rows of ``classes`` classes."""
    row, cpv = LOSS_CYCLES[kind]
    return 30 + rows * (row + (-(-classes // vw)) * cpv)
