"""Ops made in PopART's weights-from-host / weights-to-host fragments
(``popxl.context._execution_context``) run when weights are written to / read from the
device, and what they make stays on the device for the main program, checked against the
same program written with plain variables."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl.context import _execution_context

FROM_HOST = popxl.ExecutionContext.WeightsFromHostFragment
TO_HOST = popxl.ExecutionContext.WeightsToHostFragment
W0 = np.arange(4, dtype=np.float32)


def _counter_through_a_remote_buffer():
    """A remote variable loaded once by the from-host fragment, doubled plus one by each
    run, stored back by the to-host fragment."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        buf = popxl.remote_buffer((4,), popxl.float32)
        var = popxl.remote_variable(W0, buf, name="w")
        with _execution_context(FROM_HOST):
            t = ops.remote_load(buf, 0)
        ops.var_updates.copy_var_update_(t, t * 2.0 + 1.0)
        d2h = popxl.d2h_stream((4,), popxl.float32)
        ops.host_store(d2h, t)
        with _execution_context(TO_HOST):
            ops.remote_store(buf, 0, t)
    return ir, var, d2h


def test_fragments_load_once_and_store_on_read() -> None:
    ir, var, d2h = _counter_through_a_remote_buffer()
    ref = W0.copy()
    with popxl.Session(ir, "ipu_model") as s:
        for _ in range(3):
            ref = ref * 2 + 1
            np.testing.assert_array_equal(s.run()[d2h], ref)  # the state stays on device
        np.testing.assert_array_equal(s.get_tensor_data(var), ref)  # to-host fragment ran
        s.write_variable_data(var, np.zeros(4, np.float32))  # from-host fragment reloads
        np.testing.assert_array_equal(s.run()[d2h], np.ones(4, np.float32))


def test_a_fragment_reading_what_a_later_program_makes_is_refused() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(W0) + 1.0  # main program
        with _execution_context(FROM_HOST):
            x * 2.0
    with pytest.raises(NotImplementedError, match="made by an op of a program that runs after"):
        popxl.Session(ir, "ipu_model")


def test_fragment_ops_in_a_subgraph_are_refused() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(W0)

        def body(t: popxl.Tensor) -> popxl.Tensor:
            with _execution_context(FROM_HOST):
                return t + 1.0

        ops.call(ir.create_graph(body, x), x)
    with pytest.raises(NotImplementedError, match="WeightsFromHostFragment"):
        popxl.Session(ir, "ipu_model")
