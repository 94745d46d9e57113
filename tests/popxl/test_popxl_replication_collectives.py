"""popxl.ops.collectives on the IPU Model, against NumPy computed per replica from each
replica's group (spec/popxl.md 1.14 and 2): all-reduce (and in place), reduce-scatter with
padding, all-gather in its four output modes, replicated and replica-sharded slices; the
"mul" quirk; collectives in subgraphs; the errors; the profile's external exchanges."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from tremula.profile import validate

C = ops.collectives

# (R, stride, group_size): every CommGroup kind for each replica count
GROUPINGS = [
    (1, 1, 1),
    (2, 1, 2),
    (2, 1, 1),
    (4, 1, 4),
    (4, 1, 2),
    (4, 2, 2),
    (8, 1, 8),
    (8, 2, 2),
    (8, 4, 2),
    (8, 2, 4),
]


# ---- NumPy oracle: one replica at a time, from its group's members ----
def members(assignment: list[int], r: int) -> list[int]:
    return [q for q, g in enumerate(assignment) if g == assignment[r]]


REDUCE = {
    "add": lambda v: np.sum(v, axis=0),
    "mean": lambda v: np.mean(v, axis=0),
    "mul": lambda v: np.mean(v, axis=0),  # PopXL maps "mul" to Mean
    "min": lambda v: np.min(v, axis=0),
    "max": lambda v: np.max(v, axis=0),
    "square_add": lambda v: np.sum(np.square(v), axis=0),
    "and": lambda v: np.all(v, axis=0),
    "or": lambda v: np.any(v, axis=0),
}


def all_reduce(x, assignment, op):
    return np.stack([REDUCE[op](x[members(assignment, r)]) for r in range(len(x))])


def chunk(flat, G, k):
    c = -(-flat.size // G)
    padded = np.concatenate([flat, np.zeros(G * c - flat.size, flat.dtype)])
    return padded[k * c : (k + 1) * c]


def reduce_scatter(x, assignment, op):
    out = []
    for r in range(len(x)):
        m = members(assignment, r)
        out.append(chunk(REDUCE[op](x[m]).reshape(-1), len(m), m.index(r)))
    return np.stack(out)


def all_gather(x, assignment):
    return np.stack([x[members(assignment, r)] for r in range(len(x))])


def own_slice(x, assignment, axis):
    out = []
    for r in range(len(x)):
        m = members(assignment, r)
        out.append(np.split(x[r], len(m), axis=axis)[m.index(r)])
    return np.stack(out)


# ---- harness ----
def run(ir, stores, device="ipu_model"):
    """Run once; return {name: [R, ...] output} and the session."""
    session = popxl.Session(ir, device)
    with session:
        out = session.run()
    R = ir.replication_factor
    return {k: out[s] if R > 1 else out[s][None] for k, s in stores.items()}, session


def store(stores, name, t):
    s = popxl.d2h_stream(t.shape, t.dtype, name=name)
    ops.host_store(s, t)
    stores[name] = s


def per_replica(ir, data, name):
    """A variable holding ``data[r]`` on replica ``r``."""
    R = ir.replication_factor
    rg = ir.replica_grouping(group_size=1)
    return popxl.variable(data if R > 1 else data[0], replica_grouping=rg, name=name)


@pytest.mark.parametrize(
    "R,stride,size", GROUPINGS, ids=[f"R{r}-s{s}-g{g}" for r, s, g in GROUPINGS]
)
def test_collectives_match_numpy_per_group(R, stride, size):
    rng = np.random.default_rng(R * 100 + stride * 10 + size)
    x = rng.integers(-4, 5, (R, 3, 4)).astype(np.float32)
    b = rng.random((R, 5)) < 0.5
    i = rng.integers(-9, 9, (R, 7)).astype(np.int32)
    s = rng.random((R, 2, 8)).astype(np.float32)
    ir = popxl.Ir(replication=R)
    stores: dict = {}
    with ir.main_graph, popxl.in_sequence():
        rg = ir.replica_grouping(stride=stride, group_size=size)
        xv, bv, iv = per_replica(ir, x, "x"), per_replica(ir, b, "b"), per_replica(ir, i, "i")
        for op in ("add", "mean", "mul", "min", "max", "square_add"):
            store(stores, f"ar_{op}", C.replicated_all_reduce(xv, op, rg))
        for op in ("and", "or"):
            store(stores, f"ar_{op}", C.replicated_all_reduce(bv, op, rg))
        store(stores, "ar_int", C.replicated_all_reduce(iv, "max", rg))
        for op in ("add", "max", "mean"):
            store(stores, f"rs_{op}", C.replicated_reduce_scatter(xv, op, rg))
        store(stores, "rs_int", C.replicated_reduce_scatter(iv, "add", rg))  # 7: padded
        store(stores, "ag_auto", C.replicated_all_gather(xv, group=rg))
        store(stores, "ag_axis1", C.replicated_all_gather(xv, 1, rg, "concat"))
        store(stores, "ag_new", C.replicated_all_gather(xv, 0, rg, "new_axis"))
        shard = C.replica_sharded_slice(iv, rg)
        assert shard.meta_shape == (7,)
        store(stores, "shard", shard)
        store(stores, "unshard", C.replicated_all_gather(shard, group=rg))  # meta_shape
        sv = per_replica(ir, s, "s")
        store(stores, "slice_last", C.replicated_slice(sv, -1, rg))
        if size <= 2:
            store(stores, "slice0", C.replicated_slice(sv, 0, rg))
        C.replicated_all_reduce_(iv, "add", rg)
        store(stores, "inplace", iv)
    out, session = run(ir, stores)
    a = rg.assignment
    for op in ("add", "mean", "mul", "min", "max", "square_add"):
        np.testing.assert_allclose(out[f"ar_{op}"], all_reduce(x, a, op), rtol=1e-6)
    for op in ("and", "or"):
        np.testing.assert_array_equal(out[f"ar_{op}"], all_reduce(b, a, op))
    np.testing.assert_array_equal(out["ar_int"], all_reduce(i, a, "max"))
    for op in ("add", "max", "mean"):
        np.testing.assert_allclose(out[f"rs_{op}"], reduce_scatter(x, a, op), rtol=1e-6)
    np.testing.assert_array_equal(out["rs_int"], reduce_scatter(i, a, "add"))
    gathered = all_gather(x, a)  # [R, G, 3, 4]
    np.testing.assert_array_equal(out["ag_new"], gathered)
    np.testing.assert_array_equal(out["ag_auto"], np.concatenate(list(gathered.swapaxes(0, 1)), 1))
    np.testing.assert_array_equal(out["ag_axis1"], np.concatenate(list(gathered.swapaxes(0, 1)), 2))
    shards = np.stack([chunk(i[r], size, members(a, r).index(r)) for r in range(R)])
    np.testing.assert_array_equal(out["shard"], shards)
    whole = np.stack([np.concatenate(list(shards[members(a, r)]))[:7] for r in range(R)])
    np.testing.assert_array_equal(out["unshard"], whole)
    sliced = own_slice(s, a, 1)
    if size == 8:  # slices of size 1: the axis is dropped
        sliced = sliced[..., 0]
    np.testing.assert_array_equal(out["slice_last"], sliced)
    if size <= 2:
        sliced = own_slice(s, a, 0)
        np.testing.assert_array_equal(out["slice0"], sliced if size == 1 else sliced[:, 0])
    np.testing.assert_array_equal(out["inplace"], all_reduce(i, a, "add"))
    validate(session.engine.get_graph_profile(), session.engine.get_execution_profile())


def test_reduce_scatter_of_one_element_gives_the_sum_to_the_first_member():
    """spec 1.14: shape (1,) over groups of g: the first member gets the sum, the others 0
    (test_replica_grouping.py)."""
    R = 8
    ir = popxl.Ir(replication=R)
    stores: dict = {}
    with ir.main_graph:
        rg = ir.replica_grouping(stride=2, group_size=4)
        v = per_replica(ir, np.arange(1, R + 1, dtype=np.float32)[:, None], "v")
        out = C.replicated_reduce_scatter(
            v, "add", rg, configure_output_for_replicated_tensor_sharding=True
        )
        assert out.shape == (1,) and out.meta_shape == (1,)
        store(stores, "rs", out)
    got, _ = run(ir, stores)
    sums = {0: 1 + 3 + 5 + 7, 1: 2 + 4 + 6 + 8}
    first = {0: 0, 1: 1}  # lowest replica of each group
    want = [sums[g] if first[g] == r else 0 for r, g in enumerate(rg.assignment)]
    np.testing.assert_array_equal(got["rs"][:, 0], want)


def test_collectives_in_a_repeated_subgraph_and_a_call():
    R = 4
    ir = popxl.Ir(replication=R)
    stores: dict = {}

    def body(x: popxl.Tensor):
        return C.replicated_all_reduce(x, "add", ir.replica_grouping(group_size=2)) * 0.5

    def gather(x: popxl.Tensor):
        return C.replicated_all_gather(x, output_shape="new_axis")

    with ir.main_graph:
        data = np.arange(R * 2, dtype=np.float32).reshape(R, 2)
        x = per_replica(ir, data, "x")
        g = ir.create_graph(body, x)
        (y,) = ops.repeat(g, 3, x)
        (z,) = ops.call(ir.create_graph(gather, y), y)
        store(stores, "y", y)
        store(stores, "z", z)
    got, _ = run(ir, stores)
    want = data.copy()
    for _ in range(3):  # the mean of each consecutive pair, three times
        want = all_reduce(want, [0, 0, 1, 1], "mean")
    np.testing.assert_allclose(got["y"], want)
    np.testing.assert_allclose(got["z"], np.broadcast_to(want, (R, R, 2)))


def test_collectives_are_external_exchanges_in_the_profile():
    R = 4
    ir = popxl.Ir(replication=R)
    stores: dict = {}
    with ir.main_graph:
        x = per_replica(ir, np.ones((R, 64), np.float32), "x")
        store(stores, "y", C.replicated_all_reduce(x))
    got, session = run(ir, stores)
    np.testing.assert_array_equal(got["y"], np.full((R, 64), R, np.float32))
    graph = session.engine.get_graph_profile()
    execution = session.engine.get_execution_profile()
    validate(graph, execution)
    sent = graph["externalExchanges"]["bytesSentByTile"]
    # a ring all-reduce sends 2 (G - 1) chunks of ceil(64 / 4) floats per replica
    assert sum(map(sum, sent)) == 2 * (R - 1) * 16 * 4
    assert execution["simulation"]["tileCycles"]["globalExchange"] > 0


def test_collective_errors_leave_the_ir_usable():
    R = 8
    ir = popxl.Ir(replication=R)
    stores: dict = {}
    with ir.main_graph:
        x = per_replica(ir, np.ones((R, 6), np.float32), "x")
        nonconst = ir.replica_grouping_from_assignments([0, 0, 1, 1, 0, 0, 1, 1])
        with pytest.raises(NotImplementedError, match="constant"):
            C.replicated_all_reduce(x, "add", nonconst)
        with pytest.raises(ValueError, match=r"Not a valid op: sum\. Must choose from: add"):
            C.replicated_all_reduce(x, "sum")
        with pytest.raises(TypeError, match="'and' does not apply"):
            C.replicated_all_reduce(x, "and")
        with pytest.raises(TypeError, match=r"'mul' \(reduced as 'mean'"):
            C.replicated_all_reduce(ops.cast(x, popxl.int32), "mul")  # "mul" is Mean
        with pytest.raises(ValueError, match=r"^Replicated slice must equally divide axis 0"):
            C.replicated_slice(x, 0, ir.replica_grouping(group_size=4))
        with pytest.raises(ValueError, match="meta"):
            C.replicated_all_gather(x, output_shape="meta_shape")
        with pytest.raises(ValueError, match="output_shape"):
            C.replicated_all_gather(x, output_shape="stack")
        with pytest.raises(ValueError, match="axis 2"):
            C.replicated_all_gather(x, axis=2)
        with pytest.raises(ValueError, match=r"groups 4 replica\(s\), but the Ir has replic"):
            C.replicated_all_reduce(x, group=popxl.Ir(replication=4).replica_grouping())
        with pytest.raises(TypeError, match="ReplicaGrouping"):
            C.replicated_all_reduce(x, group=C.CommGroup(C.CommGroupType.ALL, 0))
        store(stores, "y", C.replicated_all_reduce(x, "add", nonconst.const_rg))
    got, _ = run(ir, stores)
    np.testing.assert_array_equal(got["y"], np.full((R, 6), 2, np.float32))


def test_to_collective_op_names_the_ir_operator_as_popxl():
    """popxl-addons' custom collectives turn PopXL's op names into the IR's operator with
    ``to_collective_op`` (PopXL maps "mul" to Mean) and type their ``op`` with
    ``CollectiveOps``."""
    import typing

    from popxl.ops.collectives.collectives import CollectiveOps, to_collective_op

    names = typing.get_args(CollectiveOps)
    assert names == ("add", "mean", "mul", "min", "max", "and", "or", "square_add", "local")
    got = {n: to_collective_op(n).name for n in names}
    assert got == {
        "add": "Add",
        "mean": "Mean",
        "mul": "Mean",
        "min": "Min",
        "max": "Max",
        "and": "LogicalAnd",
        "or": "LogicalOr",
        "square_add": "SquareAdd",
        "local": "Local",
    }
    for bad in ("sum", "ADD", 1):
        with pytest.raises(ValueError, match=r"Not a valid op: .*Must choose from: add, mean"):
            to_collective_op(bad)


def test_all_gather_builds_popxl_tensors_and_puts_a_new_axis_at_axis():
    """PopXL gathers the flattened tensor and reshapes it: ``graph.tensors`` holds the
    input, the flatten, the gather and the reshape (spec popxl-fidelity 5); ``new_axis``
    moves the group axis to ``axis``."""
    R = 2
    data = np.arange(R * 6, dtype=np.float32).reshape(R, 2, 3)
    ir = popxl.Ir(replication=R)
    with ir.main_graph:
        v = popxl.variable(np.ones((2, 3), np.float32))
        ops.collectives.replicated_all_gather(v)
        assert len(ir.main_graph.tensors) == 4
        x_h2d = popxl.h2d_stream((2, 3), popxl.float32, name="x")
        x = ops.host_load(x_h2d)
        outs = {
            "new1": ops.collectives.replicated_all_gather(x, axis=1, output_shape="new_axis"),
            "new2": ops.collectives.replicated_all_gather(x, axis=2, output_shape="new_axis"),
            "cat1": ops.collectives.replicated_all_gather(x, axis=1),
        }
        streams = {}
        for k, t in outs.items():
            streams[k] = popxl.d2h_stream(t.shape, t.dtype, name=k)
            ops.host_store(streams[k], t)
    assert outs["new1"].shape == (2, R, 3) and outs["new2"].shape == (2, 3, R)
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run({x_h2d: data})
    for r in range(R):
        np.testing.assert_array_equal(got[streams["new1"]][r], np.stack(list(data), axis=1))
        np.testing.assert_array_equal(got[streams["new2"]][r], np.stack(list(data), axis=2))
        np.testing.assert_array_equal(got[streams["cat1"]][r], np.concatenate(list(data), 1))
