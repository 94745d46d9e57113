"""Behaviours found by the fifth round of probes written as PopXL's own tests are written
(session inputs, bindings, transforms): each pins one fix, against host-computed values."""

from __future__ import annotations

import numpy as np
import pytest

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
