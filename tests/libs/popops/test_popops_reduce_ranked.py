"""Later reduction stages whose pieces lie scattered over device memory, read rank by rank
(``reduce_inplace.ranked``): the outputs and the whole of device memory are bit for bit
those of the gathered field reduced as ``compute`` reduces it, and of ``compute`` itself,
for every operation, scales, replicas, odd shapes and special values; regions of one
element (summed pairwise by NumPy), updates and LOG_ADD keep the gather."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from tremula import poplar
from tremula.libs.popops import reduce_inplace as inplace
from tremula.libs.popops.codelets import reduce as codelets
from tremula.libs.popops.reduce import reduce, reduce_with_output

RUNS = 4


def _data(shape: tuple[int, ...], seed: int, op: str) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    if op == "MUL":
        x = (1 + 0.1 * x).astype(np.float32)
    flat = x.reshape(-1, shape[-1])
    flat[:, 0] = -0.0  # the sign of a column of -0.0 shows how a reduction starts
    flat[1, 1], flat[-1, 2], flat[2, 3] = np.inf, np.nan, np.float32(1e-42)
    return x


@pytest.fixture
def ranked(monkeypatch) -> Iterator[list[tuple[str, bool]]]:
    """Each layout offered to ``ranked``: (path, whether it took it)."""
    seen: list[tuple[str, bool]] = []
    real = inplace.ranked

    def spy(v, spec, out, lay, scale):
        run = real(v, spec, out, lay, scale)
        seen.append((lay["path"], run is not None))
        return run

    monkeypatch.setattr(inplace, "ranked", spy)
    yield seen


def _runs(shape, dims, tiles, fan_in, op, replicas=1, scaled=False) -> list[tuple[bytes, bytes]]:
    device = poplar.IPUModel(tiles_per_ipu=tiles).create_device()
    g = poplar.Graph(device.target, replication_factor=replicas)
    t = g.add_variable(poplar.FLOAT, shape, "t", mapping="linear")
    prog = poplar.Sequence()
    opts = {"maxFanIn": fan_in} if fan_in else None
    if scaled:
        kept = [s for d, s in enumerate(shape) if d not in dims]
        out = g.add_variable(poplar.FLOAT, kept, "out", mapping="linear")
        reduce_with_output(g, t, out, dims, op, prog, scale=0.75, options=opts)
    else:
        out = reduce(g, t, dims, op, prog, options=opts)
    g.create_host_write("t", t)
    g.create_host_read("out", out)
    engine = poplar.Engine(g, prog)
    engine.load(device)
    got = []
    for i in range(RUNS):
        x = np.stack([_data(shape, 10 * i + r, op) for r in range(replicas)])
        engine.write_tensor("t", x if replicas > 1 else x[0])
        engine.run(0)
        memory = engine.runtime.storage[poplar.FLOAT].tobytes()
        got.append((engine.read_tensor("out").tobytes(), memory))
    return got


CASES = [  # shape, dims, tiles, maxFanIn, replicas, scaled
    ((64, 48), (0,), 24, 4, 1, False),
    ((97, 13), (0,), 24, 4, 1, False),
    ((6, 20, 16), (0,), 16, 4, 3, False),
    ((30, 70), (0,), 16, None, 1, True),
    ((16, 200), (0,), 24, 4, 2, False),
]


@pytest.mark.parametrize("op", ["ADD", "MAX", "MIN", "MUL", "SQUARE_ADD"])
@pytest.mark.parametrize(("shape", "dims", "tiles", "fan_in", "replicas", "scaled"), CASES)
def test_pieces_read_rank_by_rank_give_the_bits_of_the_gathered_field(
    monkeypatch, ranked, op, shape, dims, tiles, fan_in, replicas, scaled
):
    """Run after run: outputs and device memory equal the gathered path's bit for bit, and
    the outputs equal compute's bit for bit, the sign of zero included (every path starts
    a sum at ``+0.0``: a column of ``-0.0`` sums to ``+0.0``)."""
    want = _runs(shape, dims, tiles, fan_in, op, replicas, scaled)
    assert all(took for _, took in ranked)
    assert ranked or op == "SQUARE_ADD"  # squared first: every later stage reads a grid
    monkeypatch.setattr(inplace, "ranked", lambda *args: None)
    assert _runs(shape, dims, tiles, fan_in, op, replicas, scaled) == want
    for cls in codelets.CODELETS:
        monkeypatch.setattr(cls, "prepare", None)
    computed = _runs(shape, dims, tiles, fan_in, op, replicas, scaled)
    assert [got for got, _ in computed] == [expected for expected, _ in want]
    if op in ("ADD", "SQUARE_ADD"):  # the column of -0.0 (no scale: 0.75 keeps the sign)
        first = np.frombuffer(want[0][0], np.float32)[0]
        assert first == 0 and not np.signbit(first)


def test_regions_of_one_element_updates_and_log_add_keep_the_gather():
    """``ranked`` declines uniform regions of one element (NumPy sums their pieces
    pairwise), an update (``out +=``) and LOG_ADD (no ufunc); it takes regions of two."""
    rng = np.random.default_rng(0)

    class Batch:  # what ranked asks of a batch: nine scattered one-element runs
        def __init__(self, direction: str) -> None:
            self.fields = {"out": type("Field", (), {"direction": direction})()}

        def stable_runs(self, name):
            memory = rng.standard_normal((1, 40)).astype(np.float32)
            return memory, rng.permutation(40)[:12], np.ones(12, np.int64)

    add, log_add = (codelets.SPECS[codelets.Operation[n]] for n in ("ADD", "LOG_ADD"))
    out = np.zeros((1, 6), np.float32)

    def ranked(direction, spec, shape):
        lay = {"path": "uniform", "shape": shape}
        return inplace.ranked(Batch(direction), spec, out[:, : 12 // shape[0]], lay, None)

    assert ranked("out", add, (2, 2)) is not None
    assert ranked("out", add, (2, 1)) is None
    assert ranked("inout", add, (2, 2)) is None
    assert ranked("out", log_add, (2, 2)) is None
