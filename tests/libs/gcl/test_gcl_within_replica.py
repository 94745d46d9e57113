"""gcl.all_reduce_within_replica: tensors on the IPUs of a replica reduced against NumPy,
every operator, uneven and tiny sizes, with and without replication; each output mapped
on its input's IPU; errors before anything is added."""

from __future__ import annotations

import numpy as np
import pytest

from tremula import poplar
from tremula.libs import gcl
from tremula.libs.gcl import CollectiveError
from tremula.profile import validate

Op = gcl.CollectiveOperator
TILES = 4
REDUCE = {
    Op.ADD: lambda s: s.sum(0, dtype=s.dtype),
    Op.MEAN: lambda s: s.astype(np.float64).mean(0),
    Op.MUL: lambda s: s.prod(0, dtype=s.dtype),
    Op.MIN: lambda s: s.min(0),
    Op.MAX: lambda s: s.max(0),
    Op.SQUARE_ADD: lambda s: (s * s).sum(0, dtype=s.dtype),
    Op.LOGICAL_AND: lambda s: s.all(0),
    Op.LOGICAL_OR: lambda s: s.any(0),
}


def run(ipus: int, shape: tuple, dtype: poplar.Type, op: Op, replicas: int = 1, seed: int = 0):
    """Inputs on IPUs 0..ipus-1 of each replica; returns (inputs [R, N, ...], outputs
    [R, N, ...], outputs' tiles per IPU)."""
    device = poplar.IPUModel(tiles_per_ipu=TILES, num_ipus=ipus * replicas).create_device()
    graph = poplar.Graph(device.target, replication_factor=replicas)
    prog = poplar.Sequence()
    ins = []
    for k in range(ipus):
        t = graph.add_variable(dtype, shape, f"x{k}")
        n = int(np.prod(shape))
        graph.set_tile_mapping(t, (k * TILES + np.arange(n) % TILES).reshape(shape))
        graph.create_host_write(f"x{k}", t)
        ins.append(t)
    outs = gcl.all_reduce_within_replica(graph, ins, op, prog, name="ar")
    for k, o in enumerate(outs):
        graph.create_host_read(f"y{k}", o)
    tiles = [graph.tiles_of(o) for o in outs]
    engine = poplar.Engine(graph, prog)
    engine.load(device)
    rng = np.random.default_rng(seed)
    data = []
    for k in range(ipus):
        if dtype is poplar.BOOL:
            x = rng.random((replicas, *shape)) < 0.6
        elif dtype is poplar.INT:
            x = rng.integers(-3, 4, (replicas, *shape)).astype(np.int32)
        else:
            x = rng.uniform(0.5, 1.5, (replicas, *shape)).astype(dtype.numpy)
        engine.write_tensor(f"x{k}", x if replicas > 1 else x[0])
        data.append(x)
    engine.run(0)
    validate(engine.get_graph_profile(), engine.get_execution_profile())
    got = [engine.read_tensor(f"y{k}").reshape(replicas, *shape) for k in range(ipus)]
    return np.stack(data, 1), np.stack(got, 1), tiles


@pytest.mark.parametrize("ipus", [1, 2, 3, 4])
@pytest.mark.parametrize("shape", [(7,), (2, 5), (1,), (2,)])
def test_add_every_ipu_gets_the_sum(ipus, shape):
    x, y, tiles = run(ipus, shape, poplar.FLOAT, Op.ADD)
    want = x[0].sum(0)
    for k in range(ipus):
        np.testing.assert_allclose(y[0, k], want, rtol=1e-6)
        assert set(np.unique(tiles[k])) <= set(range(k * TILES, (k + 1) * TILES))


@pytest.mark.parametrize("op", list(REDUCE))
def test_every_operator(op):
    dtype = poplar.BOOL if op in (Op.LOGICAL_AND, Op.LOGICAL_OR) else poplar.FLOAT
    x, y, _ = run(3, (11,), dtype, op)
    want = REDUCE[op](x[0])
    for k in range(3):
        np.testing.assert_allclose(y[0, k].astype(np.float64), want, rtol=1e-5)


@pytest.mark.parametrize("dtype", [poplar.HALF, poplar.INT])
def test_half_and_int(dtype):
    x, y, _ = run(4, (9,), dtype, Op.ADD)
    want = x[0].astype(np.float64).sum(0)
    np.testing.assert_allclose(y[0].astype(np.float64), np.broadcast_to(want, y[0].shape),
                               rtol=2e-3)  # fmt: skip


def test_replicas_reduce_independently():
    x, y, _ = run(2, (5,), poplar.FLOAT, Op.MAX, replicas=2)
    for r in range(2):
        for k in range(2):
            np.testing.assert_array_equal(y[r, k], x[r].max(0))


def test_errors_before_anything_is_added():
    device = poplar.IPUModel(tiles_per_ipu=TILES, num_ipus=2).create_device()
    graph = poplar.Graph(device.target)
    a = graph.add_variable(poplar.FLOAT, (3,), "a")
    b = graph.add_variable(poplar.FLOAT, (4,), "b")
    c = graph.add_variable(poplar.FLOAT, (3,), "c")
    poplar.map_tensor_linearly(graph, a)
    poplar.map_tensor_linearly(graph, b)
    prog = poplar.Sequence()
    cases = [
        ([], Op.ADD, "needs at least one tensor"),
        ([a, b], Op.ADD, r"tensor 1 is float \[4\], tensor 0 is float \[3\]"),
        ([a, c], Op.ADD, "tensor 1 .* is not mapped"),
        ([a, a], Op.LOCAL, "LOCAL is not a reduction"),
        ([a, a], Op.LOGICAL_AND, "does not apply to float"),
    ]
    for ts, op, match in cases:
        with pytest.raises(CollectiveError, match=match):
            gcl.all_reduce_within_replica(graph, ts, op, prog)
    assert prog.programs == []
