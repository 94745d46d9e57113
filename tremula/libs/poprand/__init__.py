"""poprand: seeded, counter-based random numbers (PopLibs' poprand).

``from tremula.libs import poprand``::

    seed = graph.add_variable(poplar.UNSIGNED_INT, (2,), "seed")
    x = poprand.uniform(graph, seed, 0, reference, poplar.FLOAT, -1.0, 1.0, prog)

Every element's value is a pure function of (seed, seed_modifier, the element's flat index in
the output, the replica index), computed with Philox4x32-10; it does not depend on the tile
mapping. Replicas draw different numbers unless ``per_replica=False``. See OVERVIEW.md.

Every name is imported on first use (:mod:`tremula.lazy`): a program without random ops
does not load the generators.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tremula.libs.poprand.codelets import CODELETS
    from tremula.libs.poprand.generate import (
        DEFAULT_SEED,
        PoprandError,
        bernoulli,
        dropout,
        log_uniform,
        normal,
        truncated_normal,
        uniform,
    )
    from tremula.libs.poprand.philox import philox4x32
else:
    from tremula.lazy import attach

    __getattr__, __dir__ = attach(__name__, __file__)

__all__ = [
    "CODELETS",
    "DEFAULT_SEED",
    "PoprandError",
    "bernoulli",
    "dropout",
    "log_uniform",
    "normal",
    "philox4x32",
    "truncated_normal",
    "uniform",
]
