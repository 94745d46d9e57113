"""poprand's cycle estimators [proposal]: PopLibs' random codelets are MultiVertices built on
the tile's hardware PRNG (urand64, f32v2grand / f16v4grand, rmask); these values follow
that shape. A vertex's ``n`` elements are split over the worker contexts
(``libs.util.multi_vertex_cycles``, in tile cycles), plus the regions each worker visits
and the supervisor's seed set-up.
"""

from __future__ import annotations

import numpy as np

from tremula.errors import CodeletError
from tremula.libs.util import multi_vertex_cycles
from tremula.target import Target

#: (kind, element type) -> (elements per vector, worker cycles per vector)
CYCLES_PER_VECTOR: dict[tuple[str, str], tuple[int, float]] = {
    ("uniform", "float"): (2, 3),  # [proposal] urand64, convert, scale + offset, store
    ("uniform", "half"): (4, 3),  # [proposal]
    ("uniform", "int"): (1, 5),  # [proposal] 64-bit draw, multiply-high, add, store
    ("normal", "float"): (2, 3),  # [proposal] f32v2grand, axpby, store
    ("normal", "half"): (4, 3),  # [proposal] f16v4grand
    ("truncated_normal", "float"): (2, 9),  # [proposal] draw + quantile polynomial
    ("truncated_normal", "half"): (4, 11),  # [proposal]
    ("bernoulli", "float"): (2, 3),  # [proposal] rmask on a vector of ones
    ("bernoulli", "half"): (4, 3),  # [proposal]
    ("bernoulli", "int"): (2, 4),  # [proposal]
    ("dropout", "float"): (2, 4),  # [proposal] load, rmask, scale, store
    ("dropout", "half"): (4, 4),  # [proposal]
    ("log_uniform", "float"): (2, 9),  # [proposal] uniform + exp (6 per float2)
    ("log_uniform", "half"): (4, 7),  # [proposal] uniform + f16v2exp
}
WORKER_OVERHEAD = 30  # [proposal] per worker: state, pointers, loop set-up
REGION_CYCLES = 8  # [proposal] per region a worker visits: pointer and count fetch
SEED_CYCLES = 20  # [proposal] supervisor: seed and counter set-up before the workers start


def generator(
    target: Target, kind: str, type_name: str, n: np.ndarray, regions: np.ndarray, vertex: str
) -> np.ndarray:
    """Tile cycles of generator vertices of ``kind`` writing ``n`` elements of ``type_name``
    in ``regions`` regions each (``vertex`` names the vertex type in errors).

    Raises:
        CodeletError: the generator does not produce ``type_name``.
    """
    entry = CYCLES_PER_VECTOR.get((kind, type_name))
    if entry is None:
        known = sorted(t for k, t in CYCLES_PER_VECTOR if k == kind)
        raise CodeletError(
            f"{vertex}: output type {type_name!r} is not supported; use one of {known}"
        )
    vw, cpv = entry
    W = target.num_worker_contexts
    per_worker = -(-regions // W)
    base = multi_vertex_cycles(target, n, vw, cpv, WORKER_OVERHEAD)
    return base + W * per_worker * REGION_CYCLES + SEED_CYCLES
