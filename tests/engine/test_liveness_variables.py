"""The variables a field touches (``liveness.Linearizer.variables``, what the liveness walk
records per access): the sorted distinct ids of the variables holding any of its
addresses, for runs within one variable, across several, in any order, and empty ones; in
small spaces (a lookup table of every address) and large ones (a search)."""

from __future__ import annotations

import numpy as np
import pytest

from tremula import poplar
from tremula.engine import liveness
from tremula.engine.liveness import Linearizer
from tremula.engine.plan import Gather


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("table", [True, False])
def test_variables_are_those_holding_any_address(monkeypatch, seed, table):
    if not table:
        monkeypatch.setattr(liveness, "VAR_TABLE_MAX", 0)
    rng = np.random.default_rng(seed)
    graph = poplar.Graph(poplar.IPUModel(tiles_per_ipu=4).create_device().target)
    sizes = rng.integers(1, 30, 12)
    for i, n in enumerate(sizes):
        graph.add_variable(poplar.FLOAT, (int(n),), f"v{i}", mapping="linear")
    state = graph.state
    space = state.space(poplar.FLOAT)
    lin = Linearizer(state, [], {})
    for _ in range(6):
        k = int(rng.integers(0, 6))
        starts = rng.integers(0, space.size, k)
        lengths = np.minimum(rng.integers(1, 40, k), space.size - starts)
        addresses = np.concatenate(
            [np.arange(s, s + n) for s, n in zip(starts, lengths)] + [np.zeros(0, np.int64)]
        )
        got = lin.variables(Gather.of(poplar.FLOAT, addresses))
        want = np.unique(space.variable_at(addresses)) if addresses.size else np.zeros(0)
        assert got.tolist() == want.tolist()
        assert got.dtype == np.int64
