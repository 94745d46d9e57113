"""A reduction program gives the same bits on its first run (each codelet's generic
``compute``) and on its replayed runs (the codelets' prepared runs: in-place rows, grids
of pieces, pieces read rank by rank, the fused two-stage pass), on data holding ``-0.0``
columns, NaN and infinities, with compiled kernels and without; and a sum of ``-0.0``
starts at the vertex accumulator's ``+0.0``."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from tremula import poplar
from tremula.libs import jit
from tremula.libs.popops.reduce import reduce

RUNS = 3


def _data(shape: tuple[int, ...], op: str) -> np.ndarray:
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    if op == "MUL":
        x = (1 + 0.1 * x).astype(np.float32)
    flat = x.reshape(-1, shape[-1])
    flat[:, 0] = -0.0  # a sum of these is +0.0 (the accumulator starts there)
    if op != "MUL":  # large terms: the order of a sum shows in its bits
        flat[:, 1] *= np.float32(1e6)
    flat[1, 2], flat[2, 3], flat[-1, 4] = np.inf, np.nan, -np.inf
    return x


@pytest.fixture(params=[True, False], ids=["compiled", "numpy"])
def kernels(request) -> Iterator[bool]:
    if request.param and not jit.available():
        pytest.skip("compiled kernels are not installed")
    before = jit.set_enabled(request.param)
    yield request.param
    jit.set_enabled(before)


CASES = [  # shape, dims, tiles, maxFanIn
    ((97, 13), (0,), 24, 4),  # rows per tile, then pieces read rank by rank
    ((64, 48), (0,), 24, 4),
    ((300, 40), (0,), 16, None),  # a column sum: rows per tile, a grid of unit rows
    ((40, 300), (0,), 16, 4),
    ((21, 16, 6), (0,), 16, None),
    ((6, 20, 16), (0, 2), 16, 4),
    ((13, 97), (1,), 24, 4),  # row sums
    ((32, 256), (0,), 1472, None),  # a bias gradient: 32 pieces gathered, one reduce
]


@pytest.mark.parametrize("op", ["ADD", "SQUARE_ADD", "MAX", "MIN", "MUL"])
@pytest.mark.parametrize(("shape", "dims", "tiles", "fan_in"), CASES)
def test_first_and_replayed_runs_give_the_same_bits(kernels, op, shape, dims, tiles, fan_in):
    device = poplar.IPUModel(tiles_per_ipu=tiles).create_device()
    g = poplar.Graph(device.target)
    t = g.add_variable(poplar.FLOAT, shape, "t", mapping="linear")
    prog = poplar.Sequence()
    opts = {"maxFanIn": fan_in} if fan_in else None
    out = reduce(g, t, dims, op, prog, options=opts)
    g.create_host_write("t", t)
    g.create_host_read("out", out)
    engine = poplar.Engine(g, prog)
    engine.load(device)
    x = _data(shape, op)
    got = []
    for _ in range(RUNS):
        engine.write_tensor("t", x)
        engine.run(0)
        memory = engine.runtime.storage[poplar.FLOAT].tobytes()
        got.append((engine.read_tensor("out").tobytes(), memory))
    assert got[1] == got[0] and got[2] == got[0]
    result = np.frombuffer(got[0][0], np.float32).reshape(out.shape)
    ufunc = {"ADD": np.add, "SQUARE_ADD": np.add, "MAX": np.maximum, "MIN": np.minimum}
    terms = x.astype(np.float64) ** (2 if op == "SQUARE_ADD" else 1)
    reducer = ufunc.get(op, np.multiply)
    with np.errstate(invalid="ignore"):  # the reference: NumPy in float64 (inf - inf: NaN)
        ref = reducer.reduce(terms, axis=dims)
        size = np.add.reduce(np.abs(np.nan_to_num(terms, posinf=0, neginf=0)), axis=dims)
    finite = np.isfinite(ref)
    np.testing.assert_array_equal(result[~finite], ref[~finite])  # NaN, inf, -inf
    assert np.all(np.abs(result[finite] - ref[finite]) <= 1e-6 * size[finite] + 1e-30)
    if len(shape) - 1 not in dims and op in ("ADD", "SQUARE_ADD"):  # the column of -0.0
        zero = result[..., 0]
        assert np.all(zero == 0) and not np.any(np.signbit(zero))
