"""The compiled run of float32 updates ``data += b * deltas`` (``codelets/axpy_kernel.py``):
the bits of the NumPy path's product and add, NaN payloads, signalling NaNs, infinities and
signed zeros included; taken only where data and deltas are disjoint row-contiguous views
of one memory; the NumPy path without numba."""

from __future__ import annotations

import numpy as np
import pytest

from tremula.libs import jit
from tremula.libs.popops.codelets import axpy_kernel
from tremula.libs.popops.codelets.scaled_add import Axpy

F32 = np.float32
needs_numba = pytest.mark.skipif(not jit.available(), reason="needs the fast extra (numba)")

NANS = [0x7FC00000, 0xFFC00000, 0x7FC12345, 0xFFC54321, 0x7F800001, 0xFF800002]
OTHERS = [0x7F800000, 0xFF800000, 0, 0x80000000, 1, 0x80000001, 0x3F800000, 0x7F7FFFFF]
SPECIAL = np.array([*NANS, *OTHERS, 0xC2F60000], np.uint32).view(F32)


def _update(data, deltas, b):
    tmp = np.empty(deltas.shape, F32)
    return Axpy([(np.asarray(b, F32).reshape(-1, 1), deltas, tmp)], data, tmp)


def _memory(rng, rows):
    """``rows`` replica rows: data in [0, 300), deltas in [400, 700): every pair of special
    values as (data, delta) in the first 225 elements, random numbers after."""
    mem = rng.standard_normal((rows, 800)).astype(F32)
    n = SPECIAL.size
    mem[:, : n * n] = np.repeat(SPECIAL, n)
    mem[:, 400 : 400 + n * n] = np.tile(SPECIAL, n)
    return mem


def _joined(mem, scales):
    """The updates of three adjacent pieces, joined where they can be (one replica row:
    ``fuse_next`` keeps rows of deltas that interleave with the data's apart)."""
    pieces = [(0, 100), (100, 101), (101, 300)] if mem.shape[0] == 1 else [(0, 300)]
    runs = [
        _update(mem[:, lo:hi], mem[:, 400 + lo : 400 + hi], b)
        for (lo, hi), b in zip(pieces, scales)
    ]
    joined = runs[0]
    for run in runs[1:]:
        joined = joined.fuse_next(run)
    return joined


@needs_numba
@pytest.mark.parametrize("rows", [1, 2])
def test_the_compiled_update_gives_the_bits_of_the_numpy_path(rows):
    rng = np.random.default_rng(4)
    mem = _memory(rng, rows)
    scales = [[-0.05, 0.25], [SPECIAL[2], -1.0], [3.0, SPECIAL[4]]]  # per replica, NaNs too
    scales = [s[:rows] for s in scales]
    fast, slow = mem.copy(), mem.copy()
    run, reference = _joined(fast, scales), _joined(slow, scales)
    reference._compiled = False  # the NumPy path
    for call in range(3):  # the first call takes the NumPy path, the later ones the loop
        with np.errstate(all="ignore"):
            run()
            reference()
        assert callable(run._compiled) == (call > 0)
        assert fast.view(np.uint32).tobytes() == slow.view(np.uint32).tobytes()
    assert np.isnan(fast[:, :300]).any() and np.isinf(fast[:, :300]).any()


@needs_numba
def test_updates_the_loop_does_not_cover_keep_the_numpy_path():
    rng = np.random.default_rng(1)
    mem = rng.standard_normal((1, 100)).astype(F32)
    grads = rng.standard_normal((1, 100)).astype(F32)
    overlapping = _update(mem[:, 10:40], mem[:, 20:50], -0.5)  # reads what it writes
    reversed_rows = _update(mem[:, 50:60], grads[:, 10:20][:, ::-1], -0.5)
    tmp = np.empty((1, 10), F32)
    wide = Axpy([(np.ones((1, 10), F32), grads[:, :10], tmp)], mem[:, :10], tmp)  # per element
    for update in (overlapping, reversed_rows, wide):
        for _ in range(2):  # the second call decides: no loop for these
            b, deltas = update.parts[0][:2]
            want = update.data + np.multiply(b, deltas)  # (deltas read before any write)
            update()
            assert np.array_equal(update.data, want)
        assert update._compiled is False


def test_without_numba_the_numpy_path_runs(monkeypatch):
    monkeypatch.setattr(jit, "_enabled", False)
    rng = np.random.default_rng(2)
    mem = _memory(rng, 1)
    want = mem.copy()
    run = _joined(mem, [[-0.05]] * 3)
    with np.errstate(all="ignore"):
        run()
        run()
        for _ in range(2):
            np.add(want[:, :300], np.float32(-0.05) * want[:, 400:700], out=want[:, :300])
    assert run._compiled is False
    assert axpy_kernel.compiled(run.parts, run.data, run.root) is None
    np.testing.assert_array_equal(mem[0, 225:300], want[0, 225:300])


@needs_numba
def test_compiling_a_kernel_adds_nothing_to_a_terminal_stdout():
    """numba's compiler sets up colorama, which writes a terminal reset to stdout at exit
    when stdout is a terminal (a PopRun instance's is): ``jit`` turns that off."""
    import os
    import pty
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from tremula.libs.popops.codelets import axpy_kernel as k\n"
        "assert k._rules() is not None\n"
        "print('done')\n"
    )
    main, child = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING"}
    proc = subprocess.run([sys.executable, "-c", code], stdout=child, env=env, timeout=120)
    os.close(child)
    out = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the terminal closed
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    assert proc.returncode == 0
    assert out.strip() == b"done", out
