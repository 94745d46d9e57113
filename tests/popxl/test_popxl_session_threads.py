"""One Session (or Engine) used from several threads (issue 15): every call holds the
engine's lock, so runs from two threads give each thread its own results; two sessions in
two threads keep working side by side."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

import popxl
import popxl.ops as ops
from tremula import poplar


@contextmanager
def _switch_often() -> Iterator[None]:
    """Make the interpreter switch threads every microsecond, so that unsafe interleavings
    of two threads' calls happen in nearly every run."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _in_threads(work: Callable[[int], int], count: int = 2) -> list[int]:
    """Run ``work(i)`` in ``count`` threads at once; their results (or exceptions)."""
    results: list = [None] * count
    barrier = threading.Barrier(count)

    def body(i: int) -> None:
        barrier.wait()
        try:
            results[i] = work(i)
        except Exception as exc:  # reported by the caller
            results[i] = exc

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    with _switch_often():
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return results


def _affine_session() -> tuple[popxl.Session, object, object]:
    ir = popxl.Ir()
    with ir.main_graph:
        x_s = popxl.h2d_stream((64,), popxl.float32, "x")
        y_s = popxl.d2h_stream((64,), popxl.float32, "y")
        ops.host_store(y_s, ops.host_load(x_s) * 2.0 + 1.0)
    return popxl.Session(ir, "ipu_model"), x_s, y_s


def _wrong_results(session: popxl.Session, x_s: object, y_s: object, seed: int) -> int:
    rng = np.random.default_rng(seed)
    wrong = 0
    for _ in range(300):
        x = rng.standard_normal(64).astype(np.float32)
        y = session.run({x_s: x})[y_s]
        wrong += not np.array_equal(y, x * np.float32(2) + np.float32(1))
    return wrong


def test_one_session_shared_by_two_threads_gives_each_its_own_results():
    session, x_s, y_s = _affine_session()
    with session:
        results = _in_threads(lambda i: _wrong_results(session, x_s, y_s, i))
    assert results == [0, 0]


def test_two_sessions_in_two_threads_keep_working():
    sessions = [_affine_session() for _ in range(2)]
    for s, _, _ in sessions:
        s.__enter__()
    try:
        results = _in_threads(lambda i: _wrong_results(*sessions[i], seed=i))
    finally:
        for s, _, _ in sessions:
            s.__exit__(None, None, None)
    assert results == [0, 0]


def test_engine_lock_makes_a_connect_and_run_pair_atomic():
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    graph = poplar.Graph(device.target)
    x = graph.add_variable(poplar.FLOAT, (16,), "x", mapping="linear")
    h2d = graph.add_host_to_device_fifo("in", poplar.FLOAT, 16)
    d2h = graph.add_device_to_host_fifo("out", poplar.FLOAT, 16)
    engine = poplar.Engine(graph, poplar.Sequence([poplar.Copy(h2d, x), poplar.Copy(x, d2h)]))
    engine.load(device)

    def work(seed: int) -> int:
        wrong = 0
        for k in range(150):
            a = np.full(16, seed * 1000 + k, np.float32)
            b = np.zeros(16, np.float32)
            with engine.lock:
                engine.connect_stream("in", a)
                engine.connect_stream("out", b)
                engine.run(0)
            wrong += not np.array_equal(a, b)
        return wrong

    assert _in_threads(work) == [0, 0]
