"""Behaviours found by the fifth round of probes written as PopXL's own tests are written
(session inputs, bindings, transforms): each pins one fix, against host-computed values."""

from __future__ import annotations

import numpy as np
import pytest
from tremula_tests_evaluator import fetch

import popxl
import popxl.ops as ops
from popxl.fp8_utils import host_pow2scale_cast_to_fp8


def _float8_echo() -> tuple[popxl.Ir, popxl.HostToDeviceStream, popxl.DeviceToHostStream]:
    ir = popxl.Ir()
    with ir.main_graph:
        h2d = popxl.h2d_stream((4,), popxl.float8_143, "h")
        d2h = popxl.d2h_stream((4,), popxl.float8_143, "d")
        ops.host_store(d2h, ops.host_load(h2d))
    return ir, h2d, d2h


@pytest.mark.parametrize("downcast", [True, False])
def test_float8_stream_inputs_are_encoded_or_refused_whatever_the_downcast(downcast) -> None:
    # numbers are encoded as a float8 variable's data are (log2_scale 0), not truncated
    # into codes; float64 arrays are not taken as codes; other data are refused
    x = np.array([0.5, 1.0, 3.0, 100.0], np.float32)
    want = host_pow2scale_cast_to_fp8(x, popxl.float8_143).view(np.uint8)
    ir, h2d, d2h = _float8_echo()
    with popxl.Session(ir, "cpu") as session:
        codes = want.view(popxl.float8_143.as_numpy())
        for value in (x, x.astype(np.float64), x.tolist(), want, codes):
            got = session.run({h2d: value}, downcast_inputs=downcast)[d2h]
            np.testing.assert_array_equal(got.view(np.uint8), want)
        other = host_pow2scale_cast_to_fp8(x, popxl.float8_152)
        with pytest.raises(TypeError, match=r"stream 'h'.*float8_152 codes"):
            session.run({h2d: other}, downcast_inputs=downcast)
        with pytest.raises(TypeError, match=r"stream 'h'.*int32 is not supported"):
            session.run({h2d: np.arange(4, dtype=np.int32)}, downcast_inputs=downcast)


def _printed(capfd, build) -> list[str]:
    ir = popxl.Ir()
    with ir.main_graph:
        tensors = build()
    fetch(ir, *tensors, device="cpu")
    captured = capfd.readouterr()
    return (captured.out + captured.err).splitlines()


def test_print_tensor_lays_values_out_as_its_format_arguments_say(capfd) -> None:
    # PopXL passes its arguments to Poplar's PrintTensorFmt (NumPy's print options): the
    # default separator is a space; brackets, digits, float formats and summaries follow
    x = np.arange(3, dtype=np.float32)

    def build():
        a = popxl.variable(x, name="a")
        i = popxl.variable(np.arange(4, dtype=np.int32).reshape(2, 2), name="i")
        h = popxl.variable(np.array([1.5, -2.25], np.float16), name="h")
        s = popxl.variable(np.array([1.5, -2.25e-5], np.float32), name="s")
        big = popxl.variable(np.arange(20, dtype=np.int32), name="big")
        return (
            ops.print_tensor(a),
            ops.print_tensor(i, "title"),
            ops.print_tensor(
                h,
                separator=",",
                open_bracket="(",
                close_bracket=")",
                float_format="fixed",
                digits=3,
            ),
            ops.print_tensor(s, float_format="scientific", digits=2),
            ops.print_tensor(big, summarise_threshold=10, edge_items=2),
        )

    assert _printed(capfd, build) == [
        "print_a: [0. 1. 2.]",
        "title: [[0 1]",
        " [2 3]]",
        "print_h: ( 1.500,-2.250)",
        "print_s: [1.5e+00 -2.25e-05]",
        "print_big: [ 0  1 ... 18 19]",
    ]


def test_print_tensor_refuses_a_format_poplar_has_not() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.zeros(2, np.float32), name="a")
        n = len(ir.main_graph.tensors)
        with pytest.raises(ValueError, match=r"print_tensor\('a'\).*float_format"):
            ops.print_tensor(a, float_format="engineering")
        with pytest.raises(ValueError, match=r"print_tensor\('a'\).*open_bracket"):
            ops.print_tensor(a, open_bracket="<<")
        assert len(ir.main_graph.tensors) == n


def test_random_ops_given_one_seed_draw_the_same_numbers() -> None:
    # PopART's random op lowerings use poprand's seed modifier 0: the numbers depend on the
    # seed tensor only, and split_random_seed gives ops numbers of their own
    ir = popxl.Ir()
    with ir.main_graph:
        seed = popxl.variable(popxl.create_seeds(7), popxl.uint32, name="seed")
        ones = popxl.variable(np.ones((8, 8), np.float32), name="ones")
        s0, s1 = ops.split_random_seed(seed)
        drawn = (
            ops.random_normal(seed, (16,)),
            ops.random_normal(seed, (16,)),
            ops.dropout(ones, seed, 0.5),
            ops.dropout(ones * 3.0, seed, 0.5),
            ops.random_normal(s0, (16,)),
            ops.random_normal(s1, (16,)),
        )
    n0, n1, d0, d1, m0, m1 = fetch(ir, *drawn, device="cpu")
    np.testing.assert_array_equal(n0, n1)
    np.testing.assert_array_equal(d0 == 0, d1 == 0)  # one mask
    assert 0 < (d0 == 0).sum() < 64
    assert not np.array_equal(m0, m1) and not np.array_equal(m0, n0)


def test_remote_ops_at_entries_a_buffer_gains_later() -> None:
    # PopXL makes the op whatever the buffer's entries are then (popxl-addons grows them
    # with `buffer.entries = max(buffer.entries, n)`); the program is checked when lowered
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        buffer = popxl.remote_buffer((2,), popxl.float32, 1)
        ops.remote_store(buffer, 2, popxl.variable(np.array([3.0, 4.0], np.float32)))
        loaded = ops.remote_load(buffer, 2)
        with pytest.raises(ValueError, match="non-negative integer"):
            ops.remote_load(buffer, -1)
        buffer.entries = 3
        d2h = popxl.d2h_stream(loaded.shape, loaded.dtype)
        ops.host_store(d2h, loaded)
    with popxl.Session(ir, "cpu") as session:
        np.testing.assert_array_equal(session.run()[d2h], [3.0, 4.0])
    ir = popxl.Ir()
    with ir.main_graph:
        buffer = popxl.remote_buffer((2,), popxl.float32, 1)
        ops.remote_load(buffer, 1)
    with pytest.raises(Exception, match="offset 1 out of range for remote buffer"):
        popxl.Session(ir, "cpu")


def test_print_tensor_threshold_and_width_zero_turn_summaries_and_wrapping_off(capfd) -> None:
    def build():
        big = popxl.variable(np.arange(40, dtype=np.int32), name="big")
        return (ops.print_tensor(big, summarise_threshold=0, max_line_width=0),)

    want = "print_big: [" + " ".join(f"{i:2d}" for i in range(40)) + "]"
    assert _printed(capfd, build) == [want]
