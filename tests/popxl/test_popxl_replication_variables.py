"""Replica-grouped variables (spec/popxl.md 2.1-2.5): per-group initialisation, retrieval
("one_per_group" from the first replica of each group, "all_replicas"), writing, non-constant
groupings, remote variables, replica-sharded (RTS) variables and buffers, on the IPU Model."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from popxl.tensor import replica_sharded_buffer  # not in popxl.__all__

C = ops.collectives
#: spec 2.1's R=8 table: (stride, group_size) -> assignment
TABLE_R8 = {
    (1, 8): [0, 0, 0, 0, 0, 0, 0, 0],
    (1, 2): [0, 0, 1, 1, 2, 2, 3, 3],
    (1, 4): [0, 0, 0, 0, 1, 1, 1, 1],
    (2, 2): [0, 1, 0, 1, 2, 3, 2, 3],
    (2, 4): [0, 1, 0, 1, 0, 1, 0, 1],
    (4, 2): [0, 1, 2, 3, 0, 1, 2, 3],
    (1, 1): [0, 1, 2, 3, 4, 5, 6, 7],
}


def store(t: popxl.Tensor, name: str) -> popxl.DeviceToHostStream:
    s = popxl.d2h_stream(t.shape, t.dtype, name=name)
    ops.host_store(s, t)
    return s


def replica_ids(ir: popxl.Ir, shape: tuple[int, ...] = ()) -> popxl.Tensor:
    """A variable holding its replica's index (float32)."""
    R = ir.replication_factor
    ids = np.arange(R, dtype=np.float32).reshape((R,) + (1,) * len(shape)) * np.ones(shape)
    rg = ir.replica_grouping(group_size=1)
    return popxl.variable(ids.astype(np.float32) if R > 1 else ids[0], replica_grouping=rg)


def test_grouped_initialisation_follows_the_assignment_table():
    """test_replica_grouping.py: a variable with data arange(num_groups)[:, None] stored
    from every replica gives the grouping's assignment."""
    ir = popxl.Ir(replication=8)
    streams = {}
    with ir.main_graph:
        for (stride, size), assignment in TABLE_R8.items():
            rg = ir.replica_grouping(stride=stride, group_size=size)
            assert rg.assignment == assignment
            data = np.arange(rg.num_groups, dtype=np.int32)[:, None]
            v = popxl.variable(data if rg.num_groups > 1 else data[0], replica_grouping=rg)
            assert v.shape == (1,) and v.shape_on_replica == (1,)
            assert v.shape_on_host == ((rg.num_groups, 1) if rg.num_groups > 1 else (1,))
            streams[(stride, size)] = store(v, f"s{stride}g{size}")
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run()
    for key, s in streams.items():
        np.testing.assert_array_equal(out[s][:, 0], TABLE_R8[key])


@pytest.mark.parametrize("R", [2, 4, 8])
def test_retrieval_modes_after_replicas_diverge(R):
    """Each replica adds its index on the device: one_per_group returns the first (lowest)
    replica of each group; all_replicas returns (R, *shape), replica r's row its own value
    (spec/popart.md 2.7: PopART's weightsToHost fills AllReplicas slot r from replica r)."""
    ir = popxl.Ir(replication=R)
    groupings = [(1, R), (1, R // 2), (2, R // 2), (1, 1)]
    made = []
    with ir.main_graph:
        ids = replica_ids(ir, (2,))
        for stride, size in groupings:
            rg = ir.replica_grouping(stride=stride, group_size=size)
            base = np.arange(rg.num_groups * 2, dtype=np.float32).reshape(rg.num_groups, 2)
            data = base if rg.num_groups > 1 else base[0]
            for mode in ("one_per_group", "all_replicas"):
                v = popxl.variable(data, replica_grouping=rg, retrieval_mode=mode)
                ops.var_updates.accumulate_(v, ids)
                made.append((rg, mode, v, base))
    with popxl.Session(ir, "ipu_model") as session:
        session.run()
        values = session.get_tensors_data([v for _, _, v, _ in made])
    for rg, mode, v, base in made:
        first = [rg.assignment.index(g) for g in range(rg.num_groups)]
        per_group = base + np.array(first, np.float32)[:, None]
        got = values[v]
        if mode == "all_replicas" and rg.group_size > 1:
            own = base[rg.assignment] + np.arange(R, dtype=np.float32)[:, None]
            np.testing.assert_array_equal(got, own)
        else:
            assert got.shape == v.shape_on_host
            np.testing.assert_array_equal(got, per_group if rg.num_groups > 1 else per_group[0])


def test_write_variable_data_rules():
    R = 4
    ir = popxl.Ir(replication=R)
    with ir.main_graph, popxl.in_sequence():
        rg = ir.replica_grouping(group_size=2)
        v = popxl.variable(np.zeros((2, 3), np.float32), replica_grouping=rg, name="v")
        w = popxl.variable(
            np.zeros((2, 3), np.float32), replica_grouping=rg, retrieval_mode="all_replicas"
        )
        c = popxl.constant(np.ones(3, np.float32))
        ops.var_updates.accumulate_(v, popxl.constant(np.ones(3, np.float32)))
        s = store(v, "v")
    session = popxl.Session(ir, "ipu_model")
    with pytest.raises(ValueError, match=r"shape_on_host \(2, 3\), got \(3,\)"):
        session.write_variable_data(v, np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="float32, got data of type float64"):
        session.write_variable_data(v, np.zeros((2, 3)))
    with pytest.raises(NotImplementedError, match="all_replicas"):
        session.write_variable_data(w, np.zeros((2, 3), np.float32))
    with pytest.raises(TypeError, match="is not of type Variable"):
        session.write_variable_data(c, np.zeros(3, np.float32))
    session.write_variable_data(v, [[1, 2, 3], [4, 5, 6]])  # lists are converted
    with session:
        out = session.run()
        np.testing.assert_array_equal(out[s], [[2, 3, 4]] * 2 + [[5, 6, 7]] * 2)
        new = np.array([[10, 10, 10], [20, 20, 20]], np.float32)
        session.write_variable_data(v, new)  # attached: reaches the device at once
        np.testing.assert_array_equal(session.get_tensor_data(v), new)
        out = session.run()
        np.testing.assert_array_equal(out[s], [[11] * 3] * 2 + [[21] * 3] * 2)
    np.testing.assert_array_equal(session.get_tensor_data(v), new + 1)


def test_non_constant_grouping_variable():
    """spec 2.2: [0,0,1,1,0,0,1,1] is held under const_rg [0,0,1,1,2,2,3,3]
    (to_device_map [0,1,0,1], to_host_map [0,1])."""
    R = 8
    ir = popxl.Ir(replication=R)
    with ir.main_graph, popxl.in_sequence():
        rg = ir.replica_grouping_from_assignments([0, 0, 1, 1, 0, 0, 1, 1])
        assert not rg.is_const and rg.const_rg.assignment == [0, 0, 1, 1, 2, 2, 3, 3]
        assert rg.to_device_map == [0, 1, 0, 1] and rg.to_host_map == [0, 1]
        v = popxl.variable(np.array([[1.0], [2.0]], np.float32), replica_grouping=rg)
        assert v.shape_on_host == (2, 1)
        s = store(v, "v")
        ops.var_updates.accumulate_(v, popxl.constant(np.ones(1, np.float32)))
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run()
        np.testing.assert_array_equal(out[s][:, 0], [1, 1, 2, 2, 1, 1, 2, 2])
        np.testing.assert_array_equal(session.get_tensor_data(v), [[2.0], [3.0]])
        session.write_variable_data(v, np.array([[5.0], [7.0]], np.float32))
        out = session.run()
        np.testing.assert_array_equal(out[s][:, 0], [5, 5, 7, 7, 5, 5, 7, 7])


@pytest.mark.parametrize("entries", ["one", "groups", "replicas"])
def test_remote_variables_per_group(entries):
    """Each replica's entry holds its group's value; remote_load sees it; remote_store
    updates reach get_tensor_data; write_variable_data reaches the entry."""
    R = 4
    ir = popxl.Ir(replication=R)
    with ir.main_graph:
        rg = ir.replica_grouping(stride=2, group_size=2)  # 0 1 0 1
        count = {"one": 1, "groups": rg.num_groups, "replicas": R}[entries]
        buf = popxl.remote_buffer((3,), popxl.float32, entries=count)
        data = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
        v = popxl.remote_variable(data, buf, count - 1, replica_grouping=rg, name="rv")
        x = ops.remote_load(buf, count - 1)
        ops.remote_store(buf, count - 1, x * 2)
        s = store(x, "x")
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run()
        np.testing.assert_array_equal(out[s], data[rg.assignment])
        np.testing.assert_array_equal(session.get_tensor_data(v), data * 2)
        out = session.run()
        np.testing.assert_array_equal(out[s], (data * 2)[rg.assignment])
        session.write_variable_data(v, data + 1)
        out = session.run()
        np.testing.assert_array_equal(out[s], (data + 1)[rg.assignment])
    np.testing.assert_array_equal(session.get_tensor_data(v), (data + 1) * 2)


RTS = [(2, 1, 2, None), (4, 1, 4, 2), (8, 2, 2, None), (8, 1, 4, 4), (8, 1, 8, 2), (8, 1, 1, 1)]


@pytest.mark.parametrize("R,stride,size,shard_over", RTS)
def test_replica_sharded_variable(R, stride, size, shard_over):
    """The shard on each replica is its chunk of its group's value (flattened, zero
    padded; members 0..shard_over-1 hold one copy, the next ones another); gathering
    over the shard group restores it; shard updates come back to the host."""
    ir = popxl.Ir(replication=R)
    with ir.main_graph, popxl.in_sequence():
        rg = ir.replica_grouping(stride=stride, group_size=size)
        n = shard_over or size
        base = np.arange(rg.num_groups * 10, dtype=np.float32).reshape(rg.num_groups, 2, 5)
        data = base if rg.num_groups > 1 else base[0]
        var, shard = popxl.replica_sharded_variable(
            data, replica_grouping=rg, shard_over=shard_over, name="w"
        )
        chunk = -(-10 // n)
        assert var.shape == (2, 5) and shard.shape == (chunk,) and shard.meta_shape == (2, 5)
        s_shard = store(shard, "shard")
        full = C.replicated_all_gather(shard, group=ir.replica_grouping(stride, n))
        s_full = store(full, "full")
        ops.var_updates.accumulate_(shard, popxl.constant(np.ones(chunk, np.float32)))
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run()
        got = session.get_tensor_data(var)
        with pytest.raises(TypeError, match="w_rts is not of type Constant or Variable"):
            session.get_tensor_data(shard)
        session.write_variable_data(var, np.full(var.shape_on_host, 7, np.float32))
        again = session.run()
    np.testing.assert_array_equal(again[s_full], np.full((R, 2, 5), 7))
    np.testing.assert_array_equal(session.get_tensor_data(var), np.full(var.shape_on_host, 8))
    shards = out[s_shard].reshape(R, chunk)
    fulls = out[s_full].reshape(R, 2, 5)
    for r in range(R):
        group = rg.assignment[r]
        members = [q for q, g in enumerate(rg.assignment) if g == group]
        k = members.index(r) % n
        padded = np.concatenate([base[group].reshape(-1), np.zeros(n * chunk - 10)])
        np.testing.assert_array_equal(shards[r], padded[k * chunk : (k + 1) * chunk])
        np.testing.assert_array_equal(fulls[r], base[group])
    np.testing.assert_array_equal(got, data + 1)


def test_replica_sharded_variable_is_built_as_popxl_builds_it():
    """PopXL's replica_sharded_variable is a remote replica-sharded variable in a new
    replica-sharded buffer, whose shard is an ``ops.remote_load`` named ``<name>_rts`` made
    in the weights-from-host fragment and stored back by an ``ops.remote_store`` made in the
    weights-to-host fragment: the shard is an activation, and the main graph holds one
    variable."""
    ir = popxl.Ir(replication=2)
    main = ir.main_graph
    with main:
        var, shard = popxl.replica_sharded_variable(np.arange(6, dtype=np.float32), name="w")
    assert type(var) is popxl.Variable and type(shard) is popxl.Tensor
    assert shard.name == "w_rts" and shard.shape == (3,) and shard.meta_shape == (6,)
    assert [t.id for t in main.variables] == ["w"]
    buffer, entry = var.remote
    assert (buffer.tensor_shape, buffer.meta_shape, entry) == ((3,), (6,), 0)
    assert var._pb_tensor.tensorLocationInfo.getRemoteBufferInfo() == (buffer.remote_buffer_id, 0)
    E = popxl.ExecutionContext
    made = [(o.type, o.execution_context) for o in main.ops]
    assert made == [
        ("Init", E.WeightsFromHostFragment),
        ("RemoteLoad", E.WeightsFromHostFragment),
        ("RemoteStore", E.WeightsToHostFragment),
    ]
    load, store_ = main.ops[1], main.ops[2]
    assert load.outputs == (shard,) and store_.inputs[0] is shard
    assert load.attrs["buffer"] is buffer and store_.attrs["buffer"] is buffer


def test_remote_replica_sharded_variable_and_buffer():
    R = 4
    ir = popxl.Ir(replication=R)
    with ir.main_graph:
        rg = ir.replica_grouping(group_size=2)
        buf = replica_sharded_buffer((2, 3, 3), popxl.float32, rg, entries=2)  # 2 groups first
        assert buf.tensor_shape == (5,) and buf.meta_shape == (3, 3)
        with pytest.raises(ValueError, match=r"shape \(3, 3\) must start with .* 2 groups"):
            replica_sharded_buffer((3, 3), popxl.float32, rg)
        data = np.arange(18, dtype=np.float32).reshape(2, 3, 3)
        v = popxl.remote_replica_sharded_variable(data, buf, 1, replica_grouping=rg)
        assert buf.meta_shape == (3, 3)
        shard = ops.remote_load(buf, 1)
        s = store(shard, "shard")
        ops.remote_store(buf, 1, shard + 100)
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run()
        updated = session.get_tensor_data(v)
    padded = np.concatenate([data.reshape(2, 9), np.zeros((2, 1), np.float32)], 1)
    want = [padded[g, 5 * k : 5 * k + 5] for g, k in [(0, 0), (0, 1), (1, 0), (1, 1)]]
    np.testing.assert_array_equal(out[s], want)
    np.testing.assert_array_equal(updated, data + 100)


def test_factory_errors_leave_the_ir_usable():
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        rg = ir.replica_grouping(group_size=2)
        before = len(ir.main_graph.variables), len(ir._remote_buffers)
        with pytest.raises(ValueError, match="leading axis of 2"):
            popxl.variable(np.zeros(3, np.float32), replica_grouping=rg)
        buf = popxl.remote_buffer((3,), popxl.float32, entries=2)
        with pytest.raises(ValueError, match="offset -1 must be >= 0"):
            popxl.remote_variable(np.zeros(3, np.float32), buf, -1)
        with pytest.raises(TypeError, match="offset must be an int, got float"):
            popxl.remote_variable(np.zeros(3, np.float32), buf, 1.5)
        popxl.remote_variable(np.zeros(3, np.float32), buf, 1, name="a")
        with pytest.raises(ValueError, match="shard_over 3 must divide the group size 2"):
            replica_sharded_buffer((4,), popxl.float32, rg, shard_over=3)
        with pytest.raises(ValueError, match="shard_over 3"):
            popxl.replica_sharded_variable(np.zeros((2, 4), np.float32), None, None, True, rg, 3)
        buf.meta_shape = (2, 2)
        with pytest.raises(ValueError, match=r"Cannot use RemoteBuffer\[id=1 .* of shape \(4,\)"):
            popxl.remote_replica_sharded_variable(
                np.zeros((2, 4), np.float32), buf, 0, None, None, True, rg
            )
        assert buf.meta_shape == (2, 2)
        assert len(ir.main_graph.variables) == before[0] + 1  # only 'a'
        assert len(ir._remote_buffers) == before[1] + 1  # only buf
        with pytest.raises(ValueError, match="main graph"), ir.create_empty_graph("g"):
            popxl.remote_variable(np.zeros(3, np.float32), buf)
    single = popxl.Ir()
    with single.main_graph:
        b = popxl.remote_buffer((1,), popxl.float32)
        with pytest.raises(ValueError, match=r"^The IR's global replication factor is 1"):
            popxl.remote_replica_sharded_variable(np.zeros(1, np.float32), b)
        var, shard = popxl.replica_sharded_variable(np.arange(3, dtype=np.float32))
        assert shard.shape == (3,)
    with popxl.Session(single, "ipu_model") as session:
        np.testing.assert_array_equal(session.get_tensor_data(var), [0, 1, 2])


def test_memmap_variable_is_written_back(tmp_path):
    R = 2
    ir = popxl.Ir(replication=R)
    path = tmp_path / "w.npy"
    mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(2, 2))
    mm[...] = [[1, 2], [3, 4]]
    with ir.main_graph:
        v = popxl.variable(mm, replica_grouping=ir.replica_grouping(group_size=1))
        ops.var_updates.accumulate_(v, popxl.constant(np.ones(2, np.float32)))
    with popxl.Session(ir, "ipu_model") as session:
        session.run()
    np.testing.assert_array_equal(np.load(path), [[2, 3], [4, 5]])


def test_memmap_with_a_non_constant_grouping_is_copied_with_a_warning(tmp_path):
    ir = popxl.Ir(replication=4)
    mm = np.lib.format.open_memmap(tmp_path / "w.npy", mode="w+", dtype=np.float32, shape=(2,))
    with ir.main_graph:
        rg = ir.replica_grouping_from_assignments([0, 1, 1, 0])
        with pytest.warns(UserWarning, match="not a constant replica grouping, so the variable"):
            v = popxl.variable(mm, replica_grouping=rg)
    assert not isinstance(v._data, np.memmap)


def test_memmap_warning_is_logged_and_names_the_factory(tmp_path, caplog):
    """The warning says what happens (a copy, one row per group of the constant
    refinement; the memmap is not written back) and is logged on the ``popxl`` logger."""
    ir = popxl.Ir(replication=4)
    mm = np.lib.format.open_memmap(tmp_path / "w.npy", mode="w+", dtype=np.float32, shape=(2,))
    mm[...] = [5, 7]
    buf = None
    with ir.main_graph, caplog.at_level("WARNING", logger="popxl"):
        rg = ir.replica_grouping_from_assignments([0, 1, 1, 0])
        buf = popxl.remote_buffer((), popxl.float32, 1)
        with pytest.warns(UserWarning, match="remote_variable 'r': the data is a np.memmap"):
            popxl.remote_variable(mm, buf, 0, replica_grouping=rg, name="r")
        with pytest.warns(UserWarning, match=r"weights_to_host will not write into it"):
            v = popxl.variable(mm, replica_grouping=rg, name="v")
    assert "not a constant replica grouping" in caplog.text and "variable 'v'" in caplog.text
    with popxl.Session(ir, "ipu_model") as session:
        got = session.get_tensor_data(v)
    np.testing.assert_array_equal(got, [5, 7])  # still one row per group of the user's grouping


@pytest.mark.parametrize("R", [16, 256])
def test_retrieval_shapes_for_many_replicas(R):
    """test_tensor_data.py::TestReplicaGroupedVariables sizes: (num_groups, *shape) or the
    plain shape for one_per_group, (R, *shape) for all_replicas."""
    ir = popxl.Ir(replication=R)
    made = []
    with ir.main_graph:
        for stride, size in [(1, R), (1, R // 2), (2, R // 2), (4, 4), (1, 1)]:
            rg = ir.replica_grouping(stride=stride, group_size=size)
            d = np.arange(rg.num_groups * 3, dtype=np.float32).reshape(rg.num_groups, 3)
            for mode in ("one_per_group", "all_replicas"):
                v = popxl.variable(
                    d if rg.num_groups > 1 else d[0], replica_grouping=rg, retrieval_mode=mode
                )
                made.append((v, rg, mode, d))
    with popxl.Session(ir, "ipu_model") as session:
        values = session.get_tensors_data([m[0] for m in made])
    for v, rg, mode, d in made:
        if mode == "all_replicas" or rg.group_size == 1:
            np.testing.assert_array_equal(values[v], d[rg.assignment])
        else:
            np.testing.assert_array_equal(values[v], d if rg.num_groups > 1 else d[0])


def test_api_names():
    import tremula.popxl as tp

    for name in ("remote_variable", "remote_replica_sharded_variable", "replica_sharded_variable"):
        assert name in popxl.__all__
    assert "replica_sharded_buffer" not in tp.__all__ and callable(tp.replica_sharded_buffer)
    assert set(C.__all__) >= {
        "CommGroup",
        "CommGroupType",
        "replica_sharded_slice",
        "replicated_all_gather",
        "replicated_all_reduce",
        "replicated_all_reduce_",
        "replicated_reduce_scatter",
        "replicated_slice",
    }
    assert "collectives" in ops.__all__


def test_replica_sharded_variable_shard_stays_on_the_device_between_reads():
    """Reading the variable while attached runs the weights-to-host fragment (the shard is
    stored to the buffer and read from there); the shard stays as it is on the device, so
    later runs keep updating it; a write reloads it through the weights-from-host
    fragment."""
    R = 2
    ir = popxl.Ir(replication=R)
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    with ir.main_graph, popxl.in_sequence():
        var, shard = popxl.replica_sharded_variable(data, name="w")
        ops.var_updates.accumulate_(shard, popxl.constant(np.ones(3, np.float32)))
        full = C.replicated_all_gather(shard)
        s_full = store(full, "full")
    with popxl.Session(ir, "ipu_model") as session:
        session.run()
        np.testing.assert_array_equal(session.get_tensor_data(var), data + 1)
        session.run()
        np.testing.assert_array_equal(session.get_tensor_data(var), data + 2)
        session.write_variable_data(var, np.zeros((2, 3), np.float32))
        out = session.run()
        np.testing.assert_array_equal(out[s_full], np.ones((R, 2, 3)))
    np.testing.assert_array_equal(session.get_tensor_data(var), np.ones((2, 3)))
