"""An Ir too big for its device is refused from its tensors' sizes before anything is
allocated (issue 15): the largest tensor alone, or the always-live variables and constants
together, must fit in a replica's tile memory."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from tremula.errors import OutOfMemoryError
from tremula.popxl.fit import check_sizes
from tremula.target import ipu2


def _refusal(ir: popxl.Ir) -> tuple[str, int]:
    """The message of the refused Session and the peak of host memory it took."""
    tracemalloc.start()
    try:
        with pytest.raises(OutOfMemoryError) as err:
            popxl.Session(ir, "ipu_model")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return str(err.value), peak


def test_a_tensor_larger_than_the_device_is_refused_before_lowering():
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.init((65536, 65536), popxl.float32, "activations")
        ops.host_store(popxl.d2h_stream(x.shape, x.dtype, "out"), x)
    message, peak = _refusal(ir)
    assert peak < 50 << 20  # not the 16 GiB tensor, nor its 48 GiB of tables
    for part in (
        "'activations' alone needs 16.0 GiB",
        "1,472 tiles x 624.0 KiB hold 897.0 MiB",
        "all 1,472 tiles would overflow",
        "11.1 MiB each",
        "'activations' (tensor (65536, 65536) float32, 16.0 GiB, in 'main_graph')",
    ):
        assert part in message, (part, message)
    assert not ir._prepared


SMALL = ipu2(
    tiles_per_ipu=4,
    memory_bytes_per_tile=4096,
    memory_element_bytes=1024,
    interleaved_memory_element_index=2,
)  # 16 KiB in all


def test_variables_that_together_exceed_the_device_are_named_largest_first():
    ir = popxl.Ir()
    with ir.main_graph:
        for i, n in enumerate((128, 768, 256, 768, 768, 768, 768)):  # 16,896 B in all
            popxl.variable(np.zeros(n, np.float32), name=f"w{i}")
        popxl.constant(np.zeros(16, np.float32), name="c")
    with pytest.raises(OutOfMemoryError) as err:
        check_sizes(ir, SMALL)
    message = str(err.value)
    assert "variables and constants (always live) need 16.6 KiB (16,960 B)" in message
    assert "4 tiles x 4.0 KiB hold 16.0 KiB" in message
    assert "'w1' (variable (768,) float32, 3.0 KiB, in 'main_graph')" in message
    order = [message.index(f"'w{i}'") for i in (1, 3, 4, 5, 6)]
    assert order == sorted(order)
    assert "'w0'" not in message and "'w2'" not in message  # the five largest only


def test_remote_variables_do_not_count_and_allow_out_of_memory_checks_only_the_largest():
    ir = popxl.Ir()
    with ir.main_graph:
        buffer = popxl.remote_buffer((8192,), popxl.float32, 1)
        popxl.remote_variable(np.zeros(8192, np.float32), buffer, 0, name="table")  # 32 KiB
        for i in range(3):
            popxl.variable(np.zeros(1536, np.float32), name=f"w{i}")  # 6 KiB each
    check_sizes(ir, SMALL, allow_out_of_memory=True)  # each fits alone; the table is remote
    with pytest.raises(OutOfMemoryError, match=r"always live\) need 18.0 KiB"):
        check_sizes(ir, SMALL)
    with ir.main_graph:
        popxl.variable(np.zeros(4097, np.float32), name="big")
    with pytest.raises(OutOfMemoryError, match=r"tensor 'big' alone needs 16.0 KiB"):
        check_sizes(ir, SMALL, allow_out_of_memory=True)
