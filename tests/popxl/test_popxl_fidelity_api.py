"""PopXL's non-op API as its own tests reach it: private helpers and IR-binding views
(``Tensor._ensure_tensor``, ``dtype._pb_dtype``, ``RemoteBuffer._current_ir`` with
``getRemoteBufferInfo``), checked against hand values."""

import numpy as np
import pytest

import popart
import popart._internal.ir as _ir
import popxl
from popxl import ops


def test_ensure_tensor_makes_constants_of_the_tensors_dtype():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(2, np.float16), name="a")
        b = popxl.variable(np.ones(2, np.float16), name="b")
        assert a._ensure_tensor(b) is b
        c = a._ensure_tensor(3)
        assert isinstance(c, popxl.tensor.Constant)
        assert c.dtype == popxl.float16 and c.shape == ()
        d = a._ensure_tensor([1, 2], dtype=popxl.int32)
        assert d.dtype == popxl.int32 and d.shape == (2,)
        with pytest.raises(ValueError, match="0 elements"):
            a._ensure_tensor([])


def test_pb_dtype_is_popart_data_type():
    assert popxl.float32._pb_dtype == popart.DataType.FLOAT
    assert popxl.float16._pb_dtype == popart.DataType.FLOAT16
    assert popxl.uint8._pb_dtype == popart.DataType.UINT8
    assert popxl.float8_143._pb_dtype == popart.DataType.FLOAT8_143
    for name in ("bool", "int8", "int64", "uint32", "float64", "complex64"):
        d = popxl.dtype.from_name(name)
        assert popxl.dtype.as_dtype(d._pb_dtype) is d


def test_tensor_info_is_popart_typed():
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.zeros((2, 3), np.float16), name="v")
    info = v._pb_tensor.info
    assert info.dataType() == popart.DataType.FLOAT16
    assert info.shape() == [2, 3] and info.nelms() == 6 and info.nbytes() == 12
    assert info.data_type_lcase() == "float16"
    assert _ir.TensorInfo("FLOAT16", [2, 3]) == info
    assert _ir.TensorInfo(_ir.DataType.FLOAT16, (2, 3)) == info
    assert _ir.TensorInfo(popxl.float16, [2, 3]) == info


def test_remote_buffer_info_through_current_ir():
    ir = popxl.Ir()
    with ir.main_graph:
        rb = popxl.RemoteBuffer((1, 2), popxl.float16, 3)
        assert rb._current_ir == ir._pb_ir
        info = rb._current_ir.getRemoteBufferInfo(rb.remote_buffer_id)
        assert info.repeats == 3
        assert info.TensorInfo.shape() == [1, 2]
        assert info.TensorInfo.dataType() == popxl.float16._pb_dtype
        # setting it through the bindings is what set_remote_buffer_info does
        new = _ir.RemoteBufferInfo(_ir.TensorInfo(_ir.DataType.FLOAT, [4]), 2)
        rb._current_ir.setRemoteBufferInfo(rb.remote_buffer_id, new)
        assert (rb.tensor_shape, rb.tensor_dtype, rb.entries) == ((4,), popxl.float32, 2)
        rb.set_remote_buffer_info(popxl.int32, (5,), 1)
        info = ir._pb_ir.getRemoteBufferInfo(1)
        assert (info.TensorInfo.shape(), info.repeats) == ([5], 1)
        assert info.TensorInfo.dataType() == popart.DataType.INT32
        assert set(ir._pb_ir.getAllRemoteBufferInfos()) == {1}
        with pytest.raises(popart.popart_exception, match="no remote buffer with id 7"):
            ir._pb_ir.getRemoteBufferInfo(7)
        with pytest.raises(ValueError, match="Entries must be"):
            ir._pb_ir.setRemoteBufferInfo(1, _ir.RemoteBufferInfo(info.TensorInfo, 0))
        assert rb.entries == 1  # a refused change leaves the buffer as it was


def test_remote_buffer_resized_through_bindings_runs():
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        rb = popxl.RemoteBuffer((3,), popxl.float32, 1)
        ir._pb_ir.setRemoteBufferInfo(
            rb.remote_buffer_id, _ir.RemoteBufferInfo(_ir.TensorInfo("FLOAT", [2]), 2)
        )
        v = popxl.remote_variable(np.array([1.0, 2.0], np.float32), rb, 1, name="v")
        x = ops.remote_load(rb, 1)
        d = popxl.d2h_stream(x.shape, x.dtype)
        ops.host_store(d, x)
    with popxl.Session(ir, "ipu_model") as s:
        np.testing.assert_array_equal(s.run()[d], [1.0, 2.0])
    np.testing.assert_array_equal(s.get_tensor_data(v), [1.0, 2.0])


def test_stream_tensor_is_the_main_graph_tensor():
    ir = popxl.Ir()
    with ir.main_graph:
        h2d = popxl.h2d_stream((2, 3), popxl.float32, name="x")
        d2h = popxl.d2h_stream((2,), popxl.int32, name="y")
    for stream in (h2d, d2h):
        t = stream._stream_tensor
        assert t.id == stream.tensor_id and t.spec == stream.spec
        assert t in ir.main_graph.tensors
        assert type(stream)._from_tensor(t) is stream
    assert h2d._stream_tensor._pb_tensor.tensorType() == _ir.TensorType.Stream
    with pytest.raises(ValueError, match="is the tensor of"):
        popxl.DeviceToHostStream._from_tensor(h2d._stream_tensor)
    with ir.main_graph:
        v = popxl.variable(1, name="v")
    with pytest.raises(ValueError, match="not the tensor of a stream"):
        popxl.HostToDeviceStream._from_tensor(v)


def test_streams_of_another_ir_are_refused_by_host_load_and_store():
    ir, other = popxl.Ir(), popxl.Ir()
    with other.main_graph:
        h2d = popxl.h2d_stream((2,), popxl.float32, name="x")
        d2h = popxl.d2h_stream((2,), popxl.float32, name="y")
    with ir.main_graph:
        before = len(ir.main_graph.tensors)
        with pytest.raises(ValueError, match="stream 'x' is not in the main graph"):
            ops.host_load(h2d)
        with pytest.raises(ValueError, match="stream 'y' is not in the main graph"):
            ops.host_store(d2h, popxl.variable(np.zeros(2, np.float32)))
        assert len(ir.main_graph.tensors) == before + 1  # the variable only


@pytest.mark.parametrize(
    "desc, replicas, ipus_used, kind, num_ipus",
    [
        ("cpu", 1, 1, popart.DeviceType.Cpu, 1),
        ("ipu_model", 1, 1, popart.DeviceType.IpuModel, 1),
        ("ipu_model", 2, 2, popart.DeviceType.IpuModel, 4),  # 2 ** ceil(log2(2 x 2))
        ("ipu_model", 4, 1, popart.DeviceType.IpuModel, 4),
        ("ipu_hw", 1, 2, popart.DeviceType.Ipu, 2),  # an IPU Model in Tremula
    ],
)
def test_session_device_is_a_popart_device_info(desc, replicas, ipus_used, kind, num_ipus):
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        v = popxl.variable(np.ones(2, np.float32), name="v")
        with popxl.ipu(ipus_used - 1):
            v + 1
    session = popxl.Session(ir, desc)
    device = session.device
    assert isinstance(device, popart.DeviceInfo)
    assert device.type == kind and device.numIpus == num_ipus
    assert device.tilesPerIPU == (1 if desc == "cpu" else 1472)
    with session:
        assert session.is_attached


def test_ir_session_options_are_popxls():
    """What PopXL's Ir constructor sets in its SessionOptions (spec popxl.md 1.3)."""
    opts = popxl.Ir()._pb_ir.getSessionOptions()
    assert opts.virtualGraphMode == popart.VirtualGraphMode.Manual
    assert opts.useHostCopyOps and opts.enableExplicitMainLoops
    assert opts.explicitRecomputation and opts.aliasZeroCopy
    assert opts.enableInplaceAmbiguityChecking
    assert not opts.enableVariablesCaching
    assert opts.decomposeGradSum
    assert not opts.enableReplicatedGraphs
    opts = popxl.Ir(replication=4)._pb_ir.getSessionOptions()
    assert opts.enableReplicatedGraphs and opts.replicatedGraphCount == 4


def test_weights_to_host_logs_reused_tensor_data(capfd):
    """PopART's devicex logs, at DEBUG, that a variable returning one value is read back
    into its own data (once per variable and session); grouped variables are not."""
    ir = popxl.Ir(replication=2)
    with ir.main_graph, popxl.in_sequence():
        w = popxl.variable(np.ones(2, np.float32), name="w")
        g = popxl.variable(
            np.ones((2, 2), np.float32), name="g", replica_grouping=ir.replica_grouping(1, 1)
        )
        w += 1
        g += 1
    logger = popart.getLogger()
    logger.setLevel("DEBUG")
    try:
        with popxl.Session(ir, "ipu_model") as s:
            s.run()
            s.weights_to_host()
    finally:
        logger.setLevel("OFF")
    err = capfd.readouterr().err
    assert err.count("Reusing TensorData for d2hWeightBuffer of tensor w") == 1
    assert "d2hWeightBuffer of tensor g" not in err
    assert "Writing weights to host complete." in err
    np.testing.assert_array_equal(s.get_tensor_data(w), [2, 2])


def test_popdist_instance_session_options(monkeypatch):
    """An instance of a PopRun job (Ir("popdist")) has the options
    popdist.popart.configureSessionOptions sets: distributed replicated graphs, the global
    factor and this instance's first replica; its replicatedGraphCount is local."""
    monkeypatch.setenv("POPDIST_NUM_TOTAL_REPLICAS", "8")
    monkeypatch.setenv("POPDIST_NUM_LOCAL_REPLICAS", "2")
    monkeypatch.setenv("POPDIST_REPLICA_INDEX_OFFSET", "4")
    monkeypatch.setenv("POPDIST_NUM_INSTANCES", "4")
    monkeypatch.setenv("POPDIST_INSTANCE_INDEX", "2")
    ir = popxl.Ir(replication="popdist")
    opts = ir._pb_ir.getSessionOptions()
    assert opts.enableDistributedReplicatedGraphs
    assert (opts.globalReplicationFactor, opts.globalReplicaOffset) == (8, 4)
    assert opts.enableReplicatedGraphs and opts.replicatedGraphCount == 2
    assert opts.getGlobalReplicationFactor() == 8
    one = popxl.Ir(replication=4)._pb_ir.getSessionOptions()
    assert not one.enableDistributedReplicatedGraphs
    assert (one.globalReplicationFactor, one.globalReplicaOffset) == (1, 0)
    assert one.getGlobalReplicationFactor() == 4


class _Scale(popxl.Module):
    class Inner(popxl.Module):
        def build(self, x):
            return x * 2

    def build(self, x):
        return x * 3


def test_create_graph_names_modules_by_class_qualname():
    """PopXL names a Module's graph after ``type(module).__qualname__`` (``.<locals>``
    removed), as it names a function's after its ``__qualname__``."""

    class Local(popxl.Module):
        def build(self, x):
            return x + 1

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32), name="x")
        names = [ir.create_graph(m, x).name for m in (_Scale(), _Scale.Inner(), Local(), Local())]
    assert names == [
        "_Scale_subgraph(0)",
        "_Scale.Inner_subgraph(1)",
        "test_create_graph_names_modules_by_class_qualname.Local_subgraph(2)",
        "test_create_graph_names_modules_by_class_qualname.Local_subgraph(3)",
    ]


def test_create_graph_refuses_callables_without_qualname():
    import functools

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32), name="x")
        for fn in (functools.partial(lambda a, b: a + b, 1), 3):
            with pytest.raises(TypeError, match=r"function or a class that extends popxl\.Module"):
                ir.create_graph(fn, x)
    assert len(ir.graphs) == 1  # nothing made


def test_ir_binding_reads_tensors_and_ops_of_every_graph():
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.ones(2, np.float32), name="v")
        sg = ir.create_graph(lambda x: x * 2, v)
        (out,) = ops.call(sg, v)
    pb = ir._pb_ir
    assert [op.opType() for op in pb.getAllOps()] == ["Call", "Mul"]
    ids = pb.getTensorIds()
    assert ids == sorted(t.id for g in (ir.main_graph, sg) for t in g.tensors)
    assert pb.containsTensor(sg.inputs[0].id) and pb.containsTensor("v")
    assert not pb.containsTensor("nothing")
    assert pb.getTensor(sg.inputs[0].id).getGraph() == sg._pb_graph
    assert pb.getTensor(out.id) == out._pb_tensor
    with pytest.raises(popart.popart_exception, match="No Ir::Tensor with TensorId 'nothing'"):
        pb.getTensor("nothing")


def test_location_info_says_where_variables_live():
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        rb = popxl.RemoteBuffer((2,), popxl.float32, 3)
        remote = popxl.remote_variable(np.ones(2, np.float32), rb, 2, name="remote")
        var, shard = popxl.replica_sharded_variable(np.ones(4, np.float32), name="rts")
        rts_buffer = popxl.replica_sharded_buffer((4,), popxl.float32)
        rrs = popxl.remote_replica_sharded_variable(np.ones(4, np.float32), rts_buffer, 0)
        plain = popxl.variable(1.0, name="plain")
        act = plain + 1
    info = remote.location_info
    assert info.isRemote() and not info.isSharded()
    assert info.getRemoteBufferInfo() == (rb.remote_buffer_id, 2)
    for sharded in (var, rrs):
        assert sharded.location_info.isRemote() and sharded.location_info.isSharded()
    assert rrs.location_info.getRemoteBufferInfo() == (rts_buffer.remote_buffer_id, 0)
    for t in (shard, plain, act):
        info = t.location_info
        assert not info.isRemote() and not info.isSharded()
        assert info.getRemoteBufferInfo() == (-1, -1)
    assert remote._pb_tensor.tensorLocationInfo == remote.location_info
    assert isinstance(remote.location_info, _ir.TensorLocationInfo)


def test_to_device_info_makes_popart_devices():
    from popxl.utils import _acquire_hw_device_with_timeout, _to_device_info

    model = _to_device_info("ipu_model", 2)
    assert isinstance(model, popart.DeviceInfo)
    assert (model.type, model.numIpus, model.tilesPerIPU) == (popart.DeviceType.IpuModel, 2, 1472)
    cpu = _to_device_info("cpu")
    assert (cpu.type, cpu.numIpus) == (popart.DeviceType.Cpu, 1)
    hw = _acquire_hw_device_with_timeout(4)
    assert (hw.type, hw.numIpus) == (popart.DeviceType.Ipu, 4)
    with pytest.raises(ValueError, match="Incorrect device type provided: gpu"):
        _to_device_info("gpu")
    with pytest.raises(ValueError, match="num_ipus"):
        _to_device_info("ipu_model", 0)
    # a session runs on such a device, and takes another of the same kind later
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.float32(1), name="v")
        v += 1
    session = popxl.Session(ir, _to_device_info("ipu_model"))
    with session:
        session.run()
    session._set_device(_to_device_info("ipu_model"))
    with session:
        session.run()
    assert session.get_tensor_data(v) == 3


def test_binding_replica_grouping_str():
    ir = popxl.Ir(replication=8)
    pb = ir.replica_grouping(2, 4)._pb_replica_grouping
    assert pb.str() == "ReplicaGrouping(numReplicas=8, stride=2, groupSize=4)" == str(pb)
    assert pb.getReplicasAt(1) == [1, 3, 5, 7] and pb.getGroupAt(6) == 0


def test_op_binding_reads_infos_and_settings():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones((2, 3), np.float16), name="a")
        with popxl.ipu(1), popxl.name_scope("foo"), popxl.io_tiles():
            b = a + 1
        c = a * 2
        with popxl.ipu(None):
            d = a - 1
    op = b._pb_tensor.getProducer()
    assert op.inInfo(0) == a._pb_tensor.info and op.outInfo(0).dataType() == popart.DataType.FLOAT16
    assert (op.inShape(0), op.outShape(0), op.inRank(1), op.outRank(0)) == ([2, 3], [2, 3], 0, 2)
    s = op.settings
    assert (s.vgraphId, s.tileSet, s.scope) == (1, _ir.TileSet.IO, "foo")
    assert s.executionContext == _ir.ExecutionContext.Normal
    assert s.graph == ir.main_graph._pb_graph
    s = c._pb_tensor.getProducer().settings
    assert (s.vgraphId, s.tileSet, s.scope) == (0, _ir.TileSet.Compute, "")
    assert d._pb_tensor.getProducer().settings.vgraphId is None
    with pytest.raises(popart.popart_exception):
        op.inInfo(2)


def test_tensor_truth_value_is_its_length_as_in_popxl():
    """PopXL's Tensor defines ``__len__`` and no ``__bool__``: ``if t:`` asks the length."""
    ir = popxl.Ir()
    with ir.main_graph:
        vec = popxl.variable(np.ones(3, np.float32), name="vec")
        empty = popxl.constant(np.ones((0, 2), np.float32), name="empty")
        scalar = popxl.variable(np.float32(1), name="scalar")
    assert bool(vec) and len(vec) == 3
    assert not empty and len(empty) == 0
    with pytest.raises(ValueError, match="doesn't have a length"):
        bool(scalar)


_X = np.arange(2 * 5 * 4, dtype=np.float32).reshape(2, 5, 4)
_KEYS = [
    0,
    -1,
    (1, 2, 3),
    slice(1, None),
    slice(None, None, -1),
    slice(None, None, 2),
    (slice(None), slice(4, 0, -2)),
    (0, slice(None, None, -3)),
    (slice(None), slice(3, 3)),
    (Ellipsis, 1),
    (None, 0),
    (slice(None), -1, slice(None, None, 2)),
    (slice(-100, 100, 3),),
]


def test_getitem_builds_slice_subsample_squeeze_and_matches_numpy():
    """PopXL's Tensor.__getitem__ (spec popxl.md 1.5): ints and slices are ops.slice (steps
    of +-1), then ops.subsample for larger steps, then ops.squeeze of the int axes."""
    ir = popxl.Ir()
    g = ir.main_graph
    streams = {}
    with g:
        x = popxl.variable(_X, name="x")
        made = {}
        for i, key in enumerate(_KEYS):
            n = len(g.ops)
            y = x[key]
            made[i] = [op.type for op in g.ops[n:]]
            assert y.shape == _X[key].shape
            if y.nelms:
                streams[i] = popxl.d2h_stream(y.shape, y.dtype, f"out{i}")
                ops.host_store(streams[i], y)
        assert x[:] is x and x[...] is x  # nothing to slice: the tensor itself
    assert made[0] == ["Slice", "Reshape"]  # ops.squeeze is a Reshape in Tremula
    assert made[5] == ["Subsample"]  # the whole axis, every other element
    assert made[4] == ["Slice"]  # a reversed axis: one slice of step -1
    assert made[6] == ["Slice", "Subsample"]
    assert made[11] == ["Slice", "Subsample", "Reshape"]
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run()
    for i, stream in streams.items():
        np.testing.assert_array_equal(out[stream], _X[_KEYS[i]])


def test_getitem_gradient_reaches_the_indexed_elements():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(_X, name="x")
        g = ir.create_graph(lambda t: t[1, ::-2] * 3.0, x)
        grad = popxl.transforms.autodiff(g)
        info = ops.call_with_info(g, x)
        seed = popxl.constant(np.ones((3, 4), np.float32), name="seed")
        (dx,) = ops.call(grad.graph, seed, inputs_dict=grad.inputs_dict(info))
        d = popxl.d2h_stream(dx.shape, dx.dtype, "dx")
        ops.host_store(d, dx)
    with popxl.Session(ir, "ipu_model") as s:
        got = s.run()[d]
    want = np.zeros_like(_X)
    want[1, ::-2] = 3.0
    np.testing.assert_array_equal(got, want)


def test_binding_tensor_type_names():
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(1.0, name="v")
        c = popxl.constant(1.0, name="c")
        h2d = popxl.h2d_stream((), popxl.float32, name="s")
        a = v + c
    names = [t._pb_tensor.tensor_type() for t in (v, c, h2d._stream_tensor, a)]
    assert names == ["Variable", "Const", "Stream", "ActGrad"]


@pytest.mark.parametrize("replicas, last_ipu, count", [(1, 0, 1), (1, 2, 4), (2, 1, 4), (4, 0, 4)])
def test_session_ipu_count(replicas, last_ipu, count):
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        v = popxl.variable(np.ones(2, np.float32), name="v")
        with popxl.ipu(last_ipu):
            v + 1
    session = popxl.Session(ir, "ipu_model")
    assert session._get_ipu_count() == count == session.device.numIpus


def test_tensors_and_streams_cannot_be_constructed_directly():
    """As in PopXL: tensors come from the factories and ops, streams from h2d_stream /
    d2h_stream; copies of existing ones still work."""
    import copy

    for cls in (
        popxl.Tensor,
        popxl.tensor.Variable,
        popxl.tensor.Constant,
        popxl.HostToDeviceStream,
        popxl.DeviceToHostStream,
    ):
        with pytest.raises(RuntimeError, match="cannot be constructed directly"):
            cls()
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.ones(2, np.float32), name="v")
        s = popxl.h2d_stream((2,), popxl.float32, name="s")
    twin = copy.copy(v)
    assert twin.id == v.id and np.array_equal(twin.host_data, v.host_data)
    assert copy.copy(s).tensor_id == "s"


def test_default_names_and_clashes_as_popxl_names_tensors():
    """PopXL names an unnamed variable or constant ``t`` (``Graph._create_tensor_id``'s
    default), a clashing id ``<id>__t<n>`` (one counter per Ir), and a tensor's name is its
    id without the graph's scope, the suffix of a clashing id included (``popxl.md``:
    "Tensor.name is the id without the graph scope")."""
    ir = popxl.Ir()
    with ir.main_graph:
        v, c = popxl.variable(np.ones(2, np.float32)), popxl.constant(np.ones(2, np.float32))
        a, a2 = popxl.variable(1.0, name="a"), popxl.variable(1.0, name="a")
    assert (v.name, c.name) == (v.id, c.id) == ("t", "t__t0")
    assert (a.name, a2.name) == ("a", "a__t1") and a2.id == "a__t1"

    def body(x):
        k = popxl.constant(1.0, name="x")
        return x + k

    g = ir.create_graph(body, popxl.TensorSpec((2,), popxl.float32))
    assert sorted(t.name for t in g.tensors) == ["add_out", "x", "x__t2"]
    assert all(t.id == f"{g.name}/{t.name}" for t in g.tensors)
