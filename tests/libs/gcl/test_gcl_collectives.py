"""gcl collectives against NumPy computed per group from the per-replica inputs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tremula import poplar
from tremula.errors import EngineError
from tremula.libs import gcl

Op = gcl.CollectiveOperator
CG, CGT, RG = gcl.CommGroup, gcl.CommGroupType, gcl.ReplicaGrouping

CONFIGS = [
    (1, None),
    (2, None),
    (2, CG(CGT.NONE)),
    (4, None),
    (4, CG(CGT.CONSECUTIVE, 2)),
    (4, CG(CGT.ORTHOGONAL, 2)),
    (4, CG(CGT.UNGROUPED)),
    (8, None),
    (8, CG(CGT.CONSECUTIVE, 4)),
    (8, CG(CGT.ORTHOGONAL, 4)),
    (8, RG(8, 2, 2)),
    (8, RG(8, 1, 2)),
]
FLOAT_OPS = [Op.ADD, Op.MEAN, Op.MUL, Op.MIN, Op.MAX, Op.SQUARE_ADD, Op.LOCAL]


def _ids(config: tuple) -> str:
    return f"R{config[0]}-{config[1]!r}"


def _size(R: int, group) -> int:
    if group is None:
        return R
    rg = group.to_grouping(R) if isinstance(group, CG) else group
    return rg.group_size


@pytest.mark.parametrize("config", CONFIGS, ids=[_ids(c) for c in CONFIGS])
def test_every_collective_float(config, harness, ref):
    R, group = config
    G = _size(R, group)
    h = harness(R)
    g, p = h.graph, h.prog
    x = h.input("x", poplar.FLOAT, (3, 5))
    x2 = h.input("x2", poplar.FLOAT, (7,))
    y = h.input("y", poplar.FLOAT, (G, 2, 3))
    for op in FLOAT_OPS:
        h.output(f"ar_{op.name}", gcl.all_reduce(g, x, op, p, group=group))
    for op in (Op.ADD, Op.MAX, Op.MEAN, Op.LOCAL):
        h.output(f"rs_{op.name}", gcl.reduce_scatter(g, x, op, p, group=group))
    h.output("ag", gcl.all_gather(g, x, p, group=group))
    h.output("a2a", gcl.all_to_all(g, y, p, group=group))
    h.output("bc", gcl.broadcast(g, x, p, root=G - 1, group=group))
    h.output("inplace", gcl.all_reduce_in_place(g, x2, "add", p, group=group))
    rng = np.random.default_rng(R)
    data = {
        "x": rng.normal(size=(R, 3, 5)).astype(np.float32),
        "x2": rng.normal(size=(R, 7)).astype(np.float32),
        "y": rng.normal(size=(R, G, 2, 3)).astype(np.float32),
    }
    out = h.run(data)
    tol = {"rtol": 1e-5, "atol": 1e-5}
    for op in FLOAT_OPS:
        want = ref["all_reduce"](data["x"], group, op)
        np.testing.assert_allclose(out[f"ar_{op.name}"], want, **tol, err_msg=op.name)
    for op in (Op.ADD, Op.MAX, Op.MEAN, Op.LOCAL):
        want = ref["reduce_scatter"](data["x"], group, op)
        np.testing.assert_allclose(out[f"rs_{op.name}"], want, **tol, err_msg=op.name)
    np.testing.assert_array_equal(out["ag"], ref["all_gather"](data["x"], group))
    np.testing.assert_array_equal(out["a2a"], ref["all_to_all"](data["y"], group))
    np.testing.assert_array_equal(out["bc"], ref["broadcast"](data["x"], group, G - 1))
    want = ref["all_reduce"](data["x2"], group, Op.ADD)
    np.testing.assert_allclose(out["inplace"], want, **tol)


DTYPE_CASES = [
    (poplar.HALF, [Op.ADD, Op.MEAN, Op.MAX, Op.SQUARE_ADD]),
    (poplar.INT, [Op.ADD, Op.MUL, Op.MIN, Op.MAX, Op.SQUARE_ADD]),
    (poplar.UNSIGNED_INT, [Op.ADD, Op.MAX]),
    (poplar.SHORT, [Op.ADD, Op.MIN]),
    (poplar.UNSIGNED_CHAR, [Op.MAX, Op.ADD]),
    (poplar.BOOL, [Op.LOGICAL_AND, Op.LOGICAL_OR, Op.LOCAL]),
]


def _data(dtype: poplar.Type, shape: tuple, rng: np.random.Generator) -> np.ndarray:
    if dtype is poplar.BOOL:
        return rng.random(shape) < 0.7
    if dtype.is_float:
        return rng.uniform(-2, 2, shape).astype(dtype.numpy)
    lo = 0 if dtype.numpy.kind == "u" else -3
    return rng.integers(lo, 4, shape).astype(dtype.numpy)


@pytest.mark.parametrize("config", [CONFIGS[5], CONFIGS[10]], ids=_ids)
@pytest.mark.parametrize("dtype,ops", DTYPE_CASES, ids=[str(c[0]) for c in DTYPE_CASES])
def test_dtypes(config, dtype, ops, harness, ref):
    R, group = config
    G = _size(R, group)
    h = harness(R)
    g, p = h.graph, h.prog
    x = h.input("x", dtype, (2, 9))
    y = h.input("y", dtype, (G, 3))
    for op in ops:
        h.output(f"ar_{op.name}", gcl.all_reduce(g, x, op, p, group=group))
        h.output(f"rs_{op.name}", gcl.reduce_scatter(g, x, op, p, group=group))
    h.output("ag", gcl.all_gather(g, x, p, group=group))
    h.output("a2a", gcl.all_to_all(g, y, p, group=group))
    h.output("bc", gcl.broadcast(g, x, p, root=1, group=group))
    rng = np.random.default_rng(7)
    data = {"x": _data(dtype, (R, 2, 9), rng), "y": _data(dtype, (R, G, 3), rng)}
    out = h.run(data)
    tol = {"rtol": 1e-2, "atol": 2e-2} if dtype is poplar.HALF else {"rtol": 0, "atol": 0}
    for op in ops:
        want = ref["all_reduce"](data["x"], group, op).astype(dtype.numpy)
        np.testing.assert_allclose(out[f"ar_{op.name}"], want, **tol, err_msg=op.name)
        want = ref["reduce_scatter"](data["x"], group, op).astype(dtype.numpy)
        np.testing.assert_allclose(out[f"rs_{op.name}"], want, **tol, err_msg=op.name)
    np.testing.assert_array_equal(out["ag"], ref["all_gather"](data["x"], group))
    np.testing.assert_array_equal(out["a2a"], ref["all_to_all"](data["y"], group))
    np.testing.assert_array_equal(out["bc"], ref["broadcast"](data["x"], group, 1))


@pytest.mark.parametrize(
    "tiles",
    ["one", "reversed", "scattered"],
)
def test_input_mappings_and_ring_directions(tiles, harness, ref):
    """Inputs on one tile, on tiles in reverse order, or scattered; both ring directions."""
    R, group = 4, CG(CGT.CONSECUTIVE, 4)
    h = harness(R, tiles=16)
    n = 37
    mapping = {
        "one": np.full(n, 5),
        "reversed": 15 - np.arange(n) * 16 // n,
        "scattered": (np.arange(n) * 7) % 16,
    }[tiles]
    x = h.input("x", poplar.FLOAT, (n,), tiles=mapping)
    y = h.input("y", poplar.FLOAT, (4, 9), tiles=np.resize(mapping, 36))
    g, p = h.graph, h.prog
    for method in ("clockwise_ring", "anticlockwise_ring"):
        opts = {"method": method}
        h.output(f"ar_{method}", gcl.all_reduce(g, x, Op.ADD, p, group=group, options=opts))
        h.output(f"rs_{method}", gcl.reduce_scatter(g, x, Op.MAX, p, group=group, options=opts))
        h.output(f"ag_{method}", gcl.all_gather(g, x, p, group=group, options=opts))
        h.output(f"a2a_{method}", gcl.all_to_all(g, y, p, group=group, options=opts))
    rng = np.random.default_rng(3)
    data = {"x": rng.normal(size=(R, n)).astype(np.float32)}
    data["y"] = rng.normal(size=(R, 4, 9)).astype(np.float32)
    out = h.run(data)
    for method in ("clockwise_ring", "anticlockwise_ring"):
        np.testing.assert_allclose(
            out[f"ar_{method}"], ref["all_reduce"](data["x"], group, Op.ADD), rtol=1e-5, atol=1e-5
        )
        np.testing.assert_array_equal(
            out[f"rs_{method}"], ref["reduce_scatter"](data["x"], group, Op.MAX)
        )
        np.testing.assert_array_equal(out[f"ag_{method}"], ref["all_gather"](data["x"], group))
        np.testing.assert_array_equal(out[f"a2a_{method}"], ref["all_to_all"](data["y"], group))
    # outputs are mapped like the inputs
    for name in ("ar_clockwise_ring", "a2a_clockwise_ring"):
        src = x if name.startswith("ar") else y
        np.testing.assert_array_equal(g.tiles_of(h.outputs[name]), g.tiles_of(src))
    ag = h.outputs["ag_clockwise_ring"]
    np.testing.assert_array_equal(g.tiles_of(ag), np.broadcast_to(g.tiles_of(x), ag.shape))


def test_scalar_and_single_element_reduce_scatter(harness, ref):
    """A shape-(1,) reduce-scatter gives the sum to index 0 and zeros elsewhere."""
    R = 4
    h = harness(R)
    s = h.input("s", poplar.FLOAT, ())
    one = h.input("one", poplar.FLOAT, (1,))
    g, p = h.graph, h.prog
    h.output("ar", gcl.all_reduce(g, s, Op.ADD, p))
    h.output("ag", gcl.all_gather(g, s, p))
    h.output("rs", gcl.reduce_scatter(g, one, Op.ADD, p))
    data = {"s": np.arange(R, dtype=np.float32), "one": np.arange(1, R + 1, dtype=np.float32)}
    out = h.run(data)
    np.testing.assert_array_equal(out["ar"], np.full(R, 6.0))
    np.testing.assert_array_equal(out["ag"], np.tile(np.arange(R, dtype=np.float32), (R, 1)))
    np.testing.assert_array_equal(out["rs"][:, 0], [10.0, 0, 0, 0])


def test_runs_again_and_inside_a_repeat(harness):
    R = 4
    h = harness(R)
    x = h.input("x", poplar.INT, (6,))
    body = poplar.Sequence()
    gcl.all_reduce_in_place(h.graph, x, Op.ADD, body, group=CG(CGT.ORTHOGONAL, 2))
    h.prog.add(poplar.Repeat(3, body))
    h.output("x_out", x)
    data = np.arange(R * 6, dtype=np.int32).reshape(R, 6)
    out = h.run({"x": data})
    want = data.copy()
    for _ in range(3):
        want = want + want[[2, 3, 0, 1]]
    np.testing.assert_array_equal(out["x_out"], want)
    h.engine.write_tensor("x", data * 2)
    h.engine.run(0)
    np.testing.assert_array_equal(h.engine.read_tensor("x_out"), want * 2)


def test_collective_under_diverging_control_flow_is_an_error(harness):
    h = harness(2)
    x = h.input("x", poplar.FLOAT, (4,))
    pred = h.input("pred", poplar.BOOL, ())
    body = poplar.Sequence()
    gcl.all_reduce_in_place(h.graph, x, Op.ADD, body)
    h.prog.add(poplar.If(pred, body))
    engine = poplar.Engine(h.graph, h.prog)
    engine.load(h.device)
    engine.write_tensor("pred", np.array([True, False]))
    with pytest.raises(EngineError, match="1 of the 2 replicas"):
        engine.run(0)


_GROUPINGS = st.sampled_from([2, 4, 8]).flatmap(
    lambda R: st.sampled_from(
        [
            (R, s, k)
            for s in range(1, R + 1)
            for k in range(1, R + 1)
            if R % s == 0 and R % (s * k) == 0 and (k > 1 or s == 1)
        ]
    )
)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    grouping=_GROUPINGS,
    n=st.integers(1, 19),
    op=st.sampled_from([Op.ADD, Op.MIN, Op.MAX, Op.MUL]),
)
def test_random_constant_groupings(grouping, n, op, harness, ref):
    R, stride, size = grouping
    rg = RG(R, stride, size)
    h = harness(R)
    x = h.input("x", poplar.INT, (n,))
    h.output("ar", gcl.all_reduce(h.graph, x, op, h.prog, group=rg))
    h.output("rs", gcl.reduce_scatter(h.graph, x, op, h.prog, group=rg))
    data = np.random.default_rng(n).integers(-3, 4, (R, n)).astype(np.int32)
    out = h.run({"x": data})
    np.testing.assert_array_equal(out["ar"], ref["all_reduce"](data, rg, op))
    np.testing.assert_array_equal(out["rs"], ref["reduce_scatter"](data, rg, op))


@pytest.mark.parametrize("group", [None, CG(CGT.ORTHOGONAL, 2)], ids=["all", "orthogonal2"])
@pytest.mark.parametrize("dtype", [poplar.FLOAT, poplar.HALF], ids=str)
def test_many_blocks_over_many_tiles(group, dtype, harness, ref):
    """Chunks of many blocks spread over 16 tiles, the last block partial."""
    R = 4
    G = _size(R, group)
    h = harness(R, tiles=16)
    g, p = h.graph, h.prog
    x = h.input("x", dtype, (3001,))
    y = h.input("y", dtype, (G, 701))
    h.output("ar", gcl.all_reduce(g, x, Op.MAX, p, group=group))
    h.output("rs", gcl.reduce_scatter(g, x, Op.MIN, p, group=group))
    h.output("ag", gcl.all_gather(g, x, p, group=group))
    h.output("a2a", gcl.all_to_all(g, y, p, group=group))
    h.output("bc", gcl.broadcast(g, x, p, root=1, group=group))
    rng = np.random.default_rng(11)
    data = {"x": _data(dtype, (R, 3001), rng), "y": _data(dtype, (R, G, 701), rng)}
    out = h.run(data)
    np.testing.assert_array_equal(out["ar"], ref["all_reduce"](data["x"], group, Op.MAX))
    np.testing.assert_array_equal(out["rs"], ref["reduce_scatter"](data["x"], group, Op.MIN))
    np.testing.assert_array_equal(out["ag"], ref["all_gather"](data["x"], group))
    np.testing.assert_array_equal(out["a2a"], ref["all_to_all"](data["y"], group))
    np.testing.assert_array_equal(out["bc"], ref["broadcast"](data["x"], group, 1))


@pytest.mark.parametrize("op", [Op.ADD, Op.MEAN, Op.SQUARE_ADD, Op.MIN], ids=str)
@pytest.mark.parametrize("dtype", [poplar.FLOAT, poplar.HALF], ids=str)
def test_prepared_runs_equal_compute_bit_for_bit(op, dtype, harness, monkeypatch):
    """The ring vertices' prepared run paths (strided views of device memory, results
    written in place; or, where the fields are no such views, a take and a put of each
    row's chunk by address) give the bits of their ``compute``, partial last block
    included, for a work buffer and for a tensor's own fragments (in place, or into a new
    output)."""
    R, group = 4, CG(CGT.ORTHOGONAL, 2)
    rng = np.random.default_rng(5)
    data = {"x": _data(dtype, (R, 1003), rng), "z": _data(dtype, (R, 3203), rng)}
    results = []
    by_address: list[str] = []
    real_addresses = gcl.codelets.row_addresses

    chunk_index: set[str] = set()  # consecutive chunk fields are read as slices

    def spy(v, *args):
        found = real_addresses(v, *args)
        by_address.append(v.vertex_type.name if found is not None else "none")
        if found is not None:
            chunk_index.update(type(at).__name__ for _, at in found[2])
        return found

    for mode in ("views", "addresses", "compute"):
        if mode == "addresses":  # as if no field formed few strided runs
            monkeypatch.setattr(gcl.codelets, "row_pieces", lambda *args: None)
            monkeypatch.setattr(gcl.codelets, "row_addresses", spy)
        if mode == "compute":
            for codelet in gcl.codelets.CODELETS:
                monkeypatch.setattr(codelet, "prepare", None)
        h = harness(R, tiles=16)
        x = h.input("x", dtype, (1003,))
        z = h.input("z", dtype, (3203,))  # whole blocks on every tile, and a remainder
        h.output("ar", gcl.all_reduce(h.graph, x, op, h.prog, group=group))
        h.output("rs", gcl.reduce_scatter(h.graph, x, op, h.prog))
        h.output("ag", gcl.all_gather(h.graph, x, h.prog))
        h.output("in_place", gcl.all_reduce_in_place(h.graph, z, op, h.prog))
        results.append(h.run(data))
    for name in ("ar", "rs", "ag", "in_place"):
        assert results[0][name].tobytes() == results[2][name].tobytes(), name
        assert results[1][name].tobytes() == results[2][name].tobytes(), name
    kinds = {name.split("<")[0] for name in by_address}
    assert kinds == {"gcl::SelectChunk", "gcl::CombineChunk", "gcl::PlaceChunk"}
    assert "slice" in chunk_index
