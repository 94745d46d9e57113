"""Helpers of the popsparse tests: random block patterns as COO matrices, layer params."""

from __future__ import annotations

import numpy as np
import pytest

from tremula import target as targets
from tremula.libs.popsparse import COOMatrix, dynamic

#: The spec's test target ("T=24", spec 5.3).
T24 = targets.ipu2(tiles_per_ipu=24)


def layer(block: int, ratio: float, batch: int, in_: int, out: int) -> dynamic.FullyConnectedParams:
    sp = dynamic.SparsityParams(
        dynamic.SparsityType.Block, dynamic.SparsityStructure.Unstructured, (block, block)
    )
    return dynamic.FullyConnectedParams.create_with_nz_ratio(sp, ratio, batch, 1, in_, out)


def random_coo(
    rng: np.random.Generator,
    rows: int,
    cols: int,
    block: int,
    density: float,
    dtype=np.float32,
    shuffle: bool = True,
    rect: tuple | None = None,
) -> COOMatrix:
    """A COO of ``round(density x blocks)`` distinct blocks, unsorted when ``shuffle``;
    ``rect = (r0, r1, c0, c1)`` (in blocks) confines them to a sub-rectangle."""
    r0, r1, c0, c1 = rect or (0, rows // block, 0, cols // block)
    n = (r1 - r0) * (c1 - c0)
    k = min(n, round(density * (rows // block) * (cols // block)))
    idx = rng.choice(n, size=k, replace=False)
    if not shuffle:
        idx = np.sort(idx)
    r, c = np.divmod(idx, c1 - c0)
    values = rng.standard_normal(k * block * block).astype(dtype)
    values[values == 0] = 1  # no explicit zeros: scipy drops them
    return COOMatrix(values, (r + r0) * block, (c + c0) * block, (block, block), rows, cols)


class Helpers:
    """What the tests share, handed out by the session fixture ``h``."""

    T24 = T24
    layer = staticmethod(layer)
    random_coo = staticmethod(random_coo)


@pytest.fixture(scope="session")
def h() -> type[Helpers]:
    return Helpers


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
