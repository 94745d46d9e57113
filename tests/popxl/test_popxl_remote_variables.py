"""Remote variables with replica groupings (spec popxl-fidelity 4): the RemoteBuffer shapes
PopXL accepts (the per-replica shape, a leading group axis of 1, any shape of as many
elements, entries grown after the variable), the popxl-addons seed-variable pattern,
replica-sharded variables in buffers made without ``replica_sharded_buffer``, whole
grouped training loops against NumPy; and the Session refusing a buffer entry the variable
cannot fit, naming both."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from tremula.errors import StreamError

C = ops.collectives


def store(t: popxl.Tensor, name: str) -> popxl.DeviceToHostStream:
    s = popxl.d2h_stream(t.shape, t.dtype, name=name)
    ops.host_store(s, t)
    return s


GROUPINGS = [(1, 4), (1, 2), (2, 2), (1, 1)]  # (stride, group_size) over 4 replicas


@pytest.mark.parametrize("stride, size", GROUPINGS)
def test_grouped_remote_variable_trains_per_group(stride, size):
    """Each replica loads its group's row and stores it back plus its replica index: the
    entries diverge within a group; "all_replicas" reads each replica's own entry
    (spec/distributed-instances.md: a buffer of R entries, one per replica)."""
    R, steps = 4, 3
    ir = popxl.Ir(replication=R)
    with ir.main_graph:
        rg = ir.replica_grouping(stride=stride, group_size=size)
        G = rg.num_groups
        data = np.arange(G * 3, dtype=np.float32).reshape(G, 3) if G > 1 else np.ones(3, np.float32)
        buf = popxl.remote_buffer((3,), popxl.float32, entries=2)
        v = popxl.remote_variable(data, buf, 1, replica_grouping=rg, retrieval_mode="all_replicas")
        ids = popxl.variable(
            np.arange(R, dtype=np.float32)[:, None] * np.ones(3, np.float32),
            replica_grouping=ir.replica_grouping(group_size=1),
        )
        x = ops.remote_load(buf, 1)
        ops.remote_store(buf, 1, x + ids)
        s = store(x, "x")
    rows = np.broadcast_to(data, (G, 3)) if G == 1 else data
    with popxl.Session(ir, "ipu_model") as session:
        for step in range(steps):
            out = session.run()
            want = rows[rg.assignment] + step * np.arange(R)[:, None]
            np.testing.assert_array_equal(out[s], want)
        got = session.get_tensor_data(v)
    own = rows[rg.assignment] + steps * np.arange(R)[:, None]
    np.testing.assert_array_equal(got, own)


def test_a_leading_group_axis_of_one():
    """One group: data with a leading axis of 1 make a (1, 3) variable; the buffer holds
    (3,) entries of as many elements (PopXL compares neither)."""
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        rg = ir.replica_grouping(group_size=2)
        buf = popxl.remote_buffer((3,), popxl.float32)
        v = popxl.remote_variable(np.array([[1, 2, 3]], np.float32), buf, replica_grouping=rg)
        assert v.shape == (1, 3) and v.shape_on_host == (1, 3)
        x = ops.remote_load(buf, 0)
        assert x.shape == (3,)
        ops.remote_store(buf, 0, x * 2)
        s = store(x, "x")
    with popxl.Session(ir, "ipu_model") as session:
        np.testing.assert_array_equal(session.run()[s], [[1, 2, 3], [1, 2, 3]])
    np.testing.assert_array_equal(session.get_tensor_data(v), [[2, 4, 6]])


def test_buffer_of_another_shape_with_as_many_elements():
    ir = popxl.Ir()
    with ir.main_graph:
        buf = popxl.remote_buffer((6,), popxl.int32)
        v = popxl.remote_variable(np.arange(6, dtype=np.int32).reshape(2, 3), buf)
        s = store(ops.remote_load(buf, 0), "x")
    with popxl.Session(ir, "cpu") as session:
        np.testing.assert_array_equal(session.run()[s], np.arange(6))
        np.testing.assert_array_equal(session.get_tensor_data(v), np.arange(6).reshape(2, 3))


def test_entries_grown_after_the_variable():
    """popxl-addons grows ``buffer.entries`` after making variables at later entries."""
    ir = popxl.Ir()
    with ir.main_graph:
        buf = popxl.remote_buffer((2,), popxl.float32, entries=1)
        a = popxl.remote_variable(np.array([1, 2], np.float32), buf, 0)
        b = popxl.remote_variable(np.array([3, 4], np.float32), buf, 2)
        buf.entries = max(buf.entries, 3)
        s = store(ops.remote_load(buf, 2), "b")
    with popxl.Session(ir, "cpu") as session:
        np.testing.assert_array_equal(session.run()[s], [3, 4])
        assert session.get_tensor_data(a).tolist() == [1, 2]
        assert session.get_tensor_data(b).tolist() == [3, 4]


def test_seed_variable_as_popxl_addons_writes_it():
    """popxl_addons.seed_variable: seeds of shape (num_groups, 2) from create_seeds in a
    ``remote_buffer((2,), uint32)``, one group per replica; each replica loads its own."""
    R = 4
    ir = popxl.Ir(replication=R)
    with ir.main_graph:
        rg = ir.replica_grouping(group_size=1)
        seeds = popxl.create_seeds(1984, replicas=rg.num_groups)
        assert seeds.shape == (R, 2) and seeds.dtype == np.uint32
        buf = popxl.remote_buffer((2,), popxl.uint32)
        v = popxl.remote_variable(seeds, buf, replica_grouping=rg, name="random_seed")
        seed_t = ops.remote_load(buf, 0, "random_seed_h2d")
        s = store(seed_t, "seed")
    with popxl.Session(ir, "ipu_model") as session:
        np.testing.assert_array_equal(session.run()[s], seeds)
        np.testing.assert_array_equal(session.get_tensor_data(v), seeds)


@pytest.mark.parametrize("shard_over", [4, 2])
def test_sharded_variable_in_a_plain_buffer(shard_over):
    """popxl-addons makes RTS buffers with ``remote_buffer(shard_shape)`` and sets
    ``meta_shape``; the shard count follows from the buffer's shape."""
    R, value = 4, np.arange(5, dtype=np.float32) + 1
    ir = popxl.Ir(replication=R)
    with ir.main_graph:
        buf = popxl.remote_buffer((-(-5 // shard_over),), popxl.float32)
        buf.meta_shape = (5,)
        v = popxl.remote_replica_sharded_variable(value, buf, 0)
        shard = ops.remote_load(buf, 0)
        assert shard.meta_shape == (5,)
        full = C.replicated_all_gather(shard, group=ir.replica_grouping(group_size=shard_over))
        assert full.shape == (5,)
        ops.remote_store(buf, 0, shard * 2)
        s = store(full, "full")
    with popxl.Session(ir, "ipu_model") as session:
        np.testing.assert_array_equal(session.run()[s], np.broadcast_to(value, (R, 5)))
    np.testing.assert_array_equal(session.get_tensor_data(v), value * 2)


# ---- what the Session refuses ----
def _session_error(build, match: str) -> None:
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        build(ir)
    with pytest.raises(StreamError, match=match):
        popxl.Session(ir, "ipu_model")


def test_a_buffer_holding_the_group_axis_is_refused_by_the_session():
    def build(ir):
        rg = ir.replica_grouping(group_size=1)
        data = np.zeros((2, 3), np.float32)
        buf = popxl.remote_buffer(data.shape, popxl.float32)  # (2, 3): one row per replica
        popxl.remote_variable(data, buf, replica_grouping=rg, name="w")
        ops.remote_load(buf, 0)

    _session_error(
        build,
        r"remote variable 'w' \(popxl.dtypes.float32, 3 elements per replica\) does not fit "
        r"an entry of RemoteBuffer\[id=1 .* \(2, 3\) entries=1\] \(6 elements\)",
    )


def test_a_buffer_of_another_dtype_is_refused_by_the_session():
    def build(ir):
        buf = popxl.remote_buffer((3,), popxl.float16)
        popxl.remote_variable(np.zeros(3, np.float32), buf, name="w")
        ops.remote_load(buf, 0)

    _session_error(build, r"remote variable 'w' \(popxl.dtypes.float32, 3 elements")


def test_an_entry_out_of_range_or_taken_is_refused_by_the_session():
    def out_of_range(ir):
        buf = popxl.remote_buffer((3,), popxl.float32, entries=2)
        popxl.remote_variable(np.zeros(3, np.float32), buf, 2, name="w")
        ops.remote_load(buf, 0)

    def taken(ir):
        buf = popxl.remote_buffer((3,), popxl.float32, entries=2)
        popxl.remote_variable(np.zeros(3, np.float32), buf, 1, name="a")
        popxl.remote_variable(np.zeros(3, np.float32), buf, 1, name="b")
        ops.remote_load(buf, 0)

    _session_error(out_of_range, r"'w' .*: entry 2 is out of range for RemoteBuffer\[id=1")
    _session_error(taken, r"'b' .*: entry 1 of RemoteBuffer\[id=1 .* already holds 'a'")


def test_an_unused_buffer_is_not_checked():
    """A variable whose buffer no op reads lives on the host only (nothing to fit)."""
    ir = popxl.Ir()
    with ir.main_graph:
        buf = popxl.remote_buffer((7,), popxl.float32)
        v = popxl.remote_variable(np.ones(3, np.float32), buf)
    with popxl.Session(ir, "cpu") as session:
        np.testing.assert_array_equal(session.get_tensor_data(v), np.ones(3))
