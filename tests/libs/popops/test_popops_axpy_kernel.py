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


def _memory(rng, rows, data=SPECIAL):
    """``rows`` replica rows: data in [0, 300), deltas in [400, 700): every pair of
    ``data`` and special values as (data, delta) first, random numbers after."""
    mem = rng.standard_normal((rows, 800)).astype(F32)
    n = SPECIAL.size
    mem[:, : n * data.size] = np.repeat(data, n)
    mem[:, 400 : 400 + n * data.size] = np.tile(SPECIAL, data.size)
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
    mem = _memory(rng, rows, SPECIAL[len(NANS) :])  # (data holding a NaN: the NumPy path's)
    scales = [[-0.05, 0.25], [SPECIAL[6], -1.0], [3.0, SPECIAL[10]]]  # per replica, inf, ...
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
        if call == 0:
            assert np.isnan(fast[:, :300]).any() and np.isinf(fast[:, :300]).any()
            fast[...] = slow[...] = np.nan_to_num(fast)  # (NaN data: the NumPy path's)


LENGTHS = [*range(1, 41), 64, 257]


def _sweep_update(mem, n, at, scale, per_row):
    """The update of ``mem[:, at : at + n]`` by ``mem[:, at + n + 3 : ...]`` under ``scale``,
    one number for all rows or one per row."""
    b = np.full((mem.shape[0] if per_row else 1, 1), scale, F32)
    return _update(mem[:, at : at + n], mem[:, at + n + 3 : at + 2 * n + 3], b)


def _second_call_bits(mem, make, numpy_path):
    """The bits the second call of an update (the compiled one where it is taken) leaves,
    from the same memory as the first, and whether the loop made them (a loop handing the
    run back must leave the memory as it was)."""
    original = mem.copy()
    update = make(mem)
    if numpy_path:
        update._compiled = False
    with np.errstate(all="ignore"):
        update()
        mem[...] = original
        update()
        bits = mem.view(np.uint32).tobytes()
        if not callable(update._compiled):
            return bits, False
        mem[...] = original
        looped = update._compiled()
    assert mem.view(np.uint32).tobytes() == (bits if looped else original.tobytes())
    return bits, looped


@needs_numba
@pytest.mark.parametrize("scale", [-0.05, SPECIAL[1], SPECIAL[4]], ids=["finite", "nan", "snan"])
@pytest.mark.parametrize("rows,per_row", [(1, False), (2, False), (2, True)])
def test_where_two_nans_meet_the_numpy_path_keeps_its_payloads(scale, rows, per_row):
    """Where a NaN datum meets a NaN product, or a NaN scale a NaN delta, NumPy's payload
    depends on the length, the position and the broadcast (the head of 16 keeps the first
    operand's, the tail the second's): each such run is the NumPy path's, at every length
    and offset; with NaNs among the deltas only (data without NaN) the loop runs."""
    nans = np.array(NANS, np.uint32)
    ran = 0
    for n in LENGTHS:
        for at in (0, 1, 3):
            j = np.arange(n)
            for data_nan in (True, False):
                mem = np.full((rows, 2 * n + 8), 0.75, F32)
                bits = mem.view(np.uint32)
                if data_nan:  # a NaN datum of another payload than its delta's everywhere
                    bits[:, at : at + n] = nans[j % 6]
                bits[:, at + n + 3 : at + 2 * n + 3] = nans[(j + 1 + j // 6) % 6]
                bits[-1, at + n + 3] = 0x3F800000  # (a delta that is a number)

                def make(m, n=n, at=at):
                    return _sweep_update(m, n, at, scale, per_row)

                fast, looped = _second_call_bits(mem.copy(), make, False)
                slow, _ = _second_call_bits(mem.copy(), make, True)
                assert fast == slow, (n, at, data_nan)
                assert not (looped and data_nan)
                ran += looped
    assert ran == (0 if np.isnan(scale) else len(LENGTHS) * 3)


@needs_numba
@pytest.mark.parametrize("width", [10, 256])
@pytest.mark.parametrize("lr", [0.05, np.nan])
def test_a_bias_update_after_nans_gives_the_bits_of_the_numpy_path(width, lr):
    """The MLP's bias updates (10 and 256 wide, joined after a weight's) from weights,
    biases and gradients holding NaNs of distinct payloads, with a NaN learning rate too."""
    rng = np.random.default_rng(width)
    weights = 64 * 3
    mem = rng.standard_normal((1, 2 * (weights + width) + 4)).astype(F32)
    bits = mem.view(np.uint32)
    grads = weights + width + 4
    for spot, payload in enumerate(NANS):  # data and gradient NaNs at several places
        bits[0, rng.integers(0, weights + width, 3)] = payload
        bits[0, grads + rng.integers(0, weights + width, 3)] = NANS[(spot + 3) % 6]
    bits[0, weights + width - 1] = NANS[2]  # the bias's last element, in a row's tail
    bits[0, grads + weights + width - 1] = NANS[5]
    parts = [(0, weights), (weights, weights + width)]

    def make(m):
        runs = [_update(m[:, lo:hi], m[:, grads + lo : grads + hi], -lr) for lo, hi in parts]
        return runs[0].fuse_next(runs[1])

    fast, _ = _second_call_bits(mem.copy(), make, False)
    slow, _ = _second_call_bits(mem.copy(), make, True)
    assert fast == slow


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
        "assert k._checked()\n"
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
