"""Round 9, API surface: parameter names PopXL's tests may pass by keyword, as in PopXL
3.x's ``popxl/session.py`` (stands for tests/unittests/python/popxl/test_session.py and
tests/integration/popxl/test_session*.py). Confidence ~70 % that PopXL names the
parameter ``tensor`` in ``Session.get_tensor_data`` and ``Session.write_variable_data``
(pinned in popxl_surface.txt as well).
"""

from __future__ import annotations

import numpy as np

import popxl
import popxl.ops as ops


def _session() -> tuple[popxl.Session, popxl.Variable, popxl.Constant]:
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.arange(4, dtype=np.float32), name="v")
        c = popxl.constant(np.full((2,), 3, dtype=np.int32), name="c")
        ops.var_updates.accumulate_(v, popxl.constant(np.ones(4, dtype=np.float32)))
    return popxl.Session(ir, "ipu_model"), v, c


def test_get_tensor_data_tensor_keyword() -> None:
    session, v, c = _session()
    np.testing.assert_array_equal(session.get_tensor_data(tensor=c), np.full((2,), 3))
    with session:
        session.run()
    np.testing.assert_array_equal(session.get_tensor_data(tensor=v), np.arange(4) + 1.0)


def test_write_variable_data_tensor_keyword() -> None:
    session, v, _ = _session()
    new = np.array([10, 20, 30, 40], dtype=np.float32)
    session.write_variable_data(tensor=v, data=new)
    np.testing.assert_array_equal(session.get_tensor_data(v), new)
    with session:
        session.run()
    np.testing.assert_array_equal(session.get_tensor_data(v), new + 1.0)
