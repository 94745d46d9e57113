"""Round 9 of the PopXL fidelity probe (issue 26): sessions, host IO, streams and the
Tensor / Ir surface, written as PopXL's ``test_session.py``, ``test_session_ctxtmgr.py``,
``test_streams.py``, ``ops/test_host_load.py`` / ``test_host_store.py``, ``test_ir.py``,
``test_tensor.py`` and ``test_dtypes.py`` would write them (PopXL's sources are recalled,
not at hand; confidence that PopXL behaves so in brackets).

One mismatch was fixed:
- ``get_tensor(s)_data`` and ``write_variable(s)_data`` refuse a tensor of another Ir with a
  ValueError naming both Irs (they read and wrote that Ir's host copy, which this session
  never moves; PopXL looks the id up in its own Ir, so it reads or writes another tensor or
  fails) (65%).

The other cases agreed with PopXL and stay as tests of what no earlier round pinned: the
weights' lifecycle through ``with session:`` (``weights_to_host_on_exit``, writes while
attached keep the other weights' device values, a memmap variable written through),
replicated runs with several host transfers fed from non-contiguous arrays, every stream
dtype round-tripping (float8 as codes), streams made in subgraphs and name scopes, edge
slices against NumPy, and the op types the dunder methods add (85-95%).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pytest

import popart._internal.ir as _ir
import popxl
import popxl.ops as ops
from popxl.fp8_utils import host_pow2scale_cast_from_fp8


# ---- the fix: a session's tensors are its Ir's ----
def _accumulating_ir() -> tuple[popxl.Ir, popxl.tensor.Variable, popxl.tensor.Variable]:
    """Two variables: each run adds 1 to ``a`` and 2 to ``b``."""
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.zeros(2, np.float32), name="a")
        b = popxl.variable(np.zeros(2, np.float32), name="b")
        ops.var_updates.accumulate_(a, popxl.constant(np.ones(2, np.float32)))
        ops.var_updates.accumulate_(b, popxl.constant(np.full(2, 2, np.float32)))
    return ir, a, b


def test_tensors_of_another_ir_are_refused_and_nothing_is_written() -> None:
    ir, a, _ = _accumulating_ir()
    other_ir, other_a, _ = _accumulating_ir()  # same ids: "a", "b"
    session = popxl.Session(ir, "ipu_model")
    for attached in (False, True):
        with session if attached else contextlib.nullcontext():
            with pytest.raises(ValueError, match=r"'a' belongs to Ir\[id=\d+\], not to this"):
                session.get_tensor_data(other_a)
            with pytest.raises(ValueError, match="not to this session's"):
                session.write_variables_data(
                    {a: np.full(2, 9, np.float32), other_a: np.full(2, 9, np.float32)}
                )
            # refused as a whole: neither host copy changed
            np.testing.assert_array_equal(session.get_tensor_data(a), np.zeros(2))
            np.testing.assert_array_equal(popxl.Session(other_ir).get_tensor_data(other_a), [0, 0])


# ---- agreements: the weights through `with session:` ----
def test_writes_while_attached_keep_the_other_weights_device_values() -> None:
    ir, a, b = _accumulating_ir()
    session = popxl.Session(ir, "ipu_model")
    np.testing.assert_array_equal(session.get_tensor_data(a), [0, 0])  # never attached
    with session:
        session.run()
        session.run()
        session.write_variable_data(a, np.full(2, 10, np.float32))
        np.testing.assert_array_equal(session.get_tensor_data(b), [4, 4])  # device value
        session.run()
        np.testing.assert_array_equal(session.get_tensor_data(a), [11, 11])
    assert not session.is_attached
    np.testing.assert_array_equal(session.get_tensor_data(b), [6, 6])
    with pytest.raises(ValueError, match="not attached"):
        session.run()


def test_weights_to_host_on_exit_false_leaves_the_host_copies() -> None:
    ir, a, _ = _accumulating_ir()
    session = popxl.Session(ir, "ipu_model", weights_to_host_on_exit=False)
    with session:
        session.run()
    np.testing.assert_array_equal(session.get_tensor_data(a), [0, 0])  # not read back
    with session:  # entering writes the host copies: the run starts again from 0
        session.run()
        np.testing.assert_array_equal(session.get_tensor_data(a), [1, 1])


def test_a_nested_context_neither_detaches_nor_reads_back() -> None:
    ir, a, _ = _accumulating_ir()
    session = popxl.Session(ir, "ipu_model")
    with session:
        session.run()
        with session as inner:
            assert inner is session
            session.run()
        assert session.is_attached
        assert np.array_equal(a.host_data, [0, 0])  # the inner exit read nothing back
    np.testing.assert_array_equal(session.get_tensor_data(a), [2, 2])


def test_a_memmap_variable_is_written_through_by_write_variable_data(tmp_path: Path) -> None:
    mm = np.memmap(tmp_path / "w.bin", np.float32, "w+", shape=(2, 2))
    mm[:] = 1
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(mm, name="v")
        ops.var_updates.accumulate_(v, popxl.constant(np.ones((2, 2), np.float32)))
    session = popxl.Session(ir, "ipu_model")
    session.write_variable_data(v, np.full((2, 2), 5, np.float32))  # detached: host only
    np.testing.assert_array_equal(mm, np.full((2, 2), 5))
    with session:
        session.run()
        assert session.get_tensor_data(v) is mm
        np.testing.assert_array_equal(mm, np.full((2, 2), 6))
        session.write_variable_data(v, np.full((2, 2), 7, np.float32))
        np.testing.assert_array_equal(mm, np.full((2, 2), 7))
        session.run()
    np.testing.assert_array_equal(mm, np.full((2, 2), 8))


# ---- agreements: host IO ----
def test_replicated_transfers_from_non_contiguous_arrays() -> None:
    """Two replicas, two host transfers (a repeat of 2 loads and stores each run): the
    host arrays are [transfers, replicas, *shape], read and written through any strides."""
    ir = popxl.Ir(replication=2)
    ir.num_host_transfers = 2
    with ir.main_graph:
        xs = popxl.h2d_stream((2, 3), popxl.float32, "x")
        ys = popxl.d2h_stream((2, 3), popxl.float32, "y")
        g = ir.create_graph(lambda: ops.host_store(ys, ops.host_load(xs) * 3))
        ops.repeat(g, 2)
    X = np.random.default_rng(0).standard_normal((2, 2, 2, 3)).astype(np.float32)
    with popxl.Session(ir, "ipu_model") as session:
        assert session.create_host_outputs()[ys].shape == (2, 2, 2, 3)
        wide = np.zeros((*X.shape, 2), np.float32)
        session.run_with_outputs({xs: np.asfortranarray(X)}, {ys: wide[..., 0]})
        np.testing.assert_array_equal(wide[..., 0], X * 3)
        assert not wide[..., 1].any()
        np.testing.assert_array_equal(session.run({xs: wide[..., 0] / 3})[ys], X * 3)
        with pytest.raises(ValueError, match=r"expected \(2, 2, 2, 3\)"):
            session.run({xs: X[0]})


@pytest.mark.parametrize(
    "dtype",
    [popxl.bool, popxl.int8, popxl.uint8, popxl.int16, popxl.uint16, popxl.int32,
     popxl.uint32, popxl.float16, popxl.float32, popxl.float8_143, popxl.float8_152],
)  # fmt: skip
def test_each_stream_dtype_round_trips(dtype: popxl.dtype) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        h = popxl.h2d_stream((3,), dtype, "x")
        d = popxl.d2h_stream((3,), dtype, "y")
        ops.host_store(d, ops.host_load(h))
    fp8 = dtype in (popxl.float8_143, popxl.float8_152)
    value = (
        np.array([1.0, -2.0, 0.5], np.float32)
        if fp8
        else np.array([1, 0, 1]).astype(dtype.as_numpy())
    )
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run({h: value})[d]
    assert out.dtype == dtype.as_numpy()
    got = host_pow2scale_cast_from_fp8(out, popxl.float32) if fp8 else out
    np.testing.assert_array_equal(got, value)  # (these values are exact in float8)


def test_streams_live_in_the_main_graph_and_only_used_ones_are_listed() -> None:
    ir = popxl.Ir()
    main = ir.main_graph
    with main:
        s = popxl.h2d_stream((2, 3), popxl.float32, "s")
        clash = popxl.h2d_stream((2, 3), popxl.float32, "s")
        with popxl.name_scope("sc"):
            scoped = popxl.h2d_stream((1,), popxl.int32, "s")
        sub = ir.create_empty_graph("sub")
        with sub:
            d = popxl.d2h_stream((2, 3), popxl.float32, "d")
            default = popxl.h2d_stream((1,), popxl.int32)
        ops.host_store(d, ops.host_load(s, "x"))
    assert [clash.tensor_id, scoped.tensor_id, default.tensor_id] == ["s__t0", "sc/s", "h2d_stream"]
    assert d._stream_tensor.graph is main and not sub.tensors
    assert s._stream_tensor._pb_tensor.tensorType() == _ir.TensorType.Stream
    assert popxl.HostToDeviceStream._from_tensor(s._stream_tensor) == s
    assert ir.get_all_h2d_streams() == {s} and ir.get_all_d2h_streams() == {d}
    with pytest.raises(TypeError, match="expected a DeviceToHostStream"), main:
        ops.host_store(s, main.tensors[0])  # type: ignore[arg-type]


# ---- agreements: Tensor ----
_X = np.arange(60, dtype=np.float32).reshape(3, 4, 5)


@pytest.mark.parametrize(
    "key",
    [(slice(-10, 10),), (slice(10, None, -1),), (slice(None), slice(None, -5, -1)),
     (slice(1, 1),), (slice(3, 0),), (slice(-1, -4, -1), 0, slice(0, 5, 2)),
     (slice(0, 3, 5),), (slice(None, None, -4), slice(2, None, -2)), (1, slice(None), -1)],
)  # fmt: skip
def test_edge_slices_match_numpy(key: object) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        y = popxl.variable(_X, name="v")[key]
        d = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(d, y)
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run()[d]
    assert out.shape == _X[key].shape
    np.testing.assert_array_equal(out, _X[key])


@pytest.mark.parametrize(
    "fn, dtype, want",
    [(lambda a, b: a % b, np.float32, ["Fmod"]), (lambda a, b: 2 % a, np.float32, ["Fmod"]),
     (lambda a, b: -a, np.float32, ["Neg"]), (lambda a, b: 2**a, np.float32, ["Pow"]),
     (lambda a, b: a[0], np.float32, ["Slice", "Reshape"]),
     (lambda a, b: a[np.array([1, 0])], np.float32, ["Gather"]),
     (lambda a, b: a[np.ones((2, 3), bool)], np.float32, ["Where"]),
     (lambda a, b: a & b, bool, ["And"]), (lambda a, b: True | a, bool, ["Or"]),
     (lambda a, b: ~a, bool, ["Not"]), (lambda a, b: a.__iadd__(b), np.float32, ["AddLhsInplace"])],
)  # fmt: skip
def test_dunder_methods_add_popxls_ops(fn, dtype, want) -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        a = popxl.variable(np.ones((2, 3), dtype), name="a")
        b = popxl.variable(np.ones((2, 3), dtype), name="b")
        before = len(g._pb_graph.getOps())
        fn(a, b)
    assert [op.opType() for op in g._pb_graph.getOps()[before:]] == want


def test_no_comparison_or_xor_dunders() -> None:
    """PopXL's Tensor compares by identity (``==``) and defines no ordering or ``^``."""
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(2, np.float32), name="a")
        assert isinstance(a == a, bool) and (a != a + 0) is True
        for op in (lambda: a < 1, lambda: a >= a, lambda: a ^ a, lambda: a // 2):
            with pytest.raises(TypeError):
                op()
