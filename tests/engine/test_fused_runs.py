"""Consecutive prepared runs fused in a replayed plan (``fuse_next`` on a prepared run, see
``Codelet.prepare``): the engine asks a prepared run for one call doing it and the next
group's prepared run only when nothing with a data effect runs between them, in replayed
runs without host timing; the results and profiles are those of the runs apart."""

from __future__ import annotations

import json

import numpy as np
from tremula_tests_engine_codelets import make_engine, new_graph, var

from tremula import poplar

RUNS = 4
#: (first, second) output addresses of every fused call made, in order
FUSED: list[tuple[int, int]] = []


class Doubled:
    """A prepared run ``y = 2 * x`` over views of device memory that fuses with the next
    one of its kind (the fused call records itself, then runs both)."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x, self.y = x, y

    def __call__(self) -> None:
        np.multiply(self.x, 2, out=self.y)

    def fuse_next(self, after):
        if not isinstance(after, Doubled):
            return None

        def both() -> None:
            FUSED.append((self.y.ctypes.data, after.y.ctypes.data))
            self()
            after()

        return both


class Double(poplar.Codelet):
    """y = 2 * x, prepared as :class:`Doubled`."""

    x = poplar.Input(poplar.FLOAT)
    y = poplar.Output(poplar.FLOAT)

    @staticmethod
    def compute(v):
        v.y = 2 * v.x

    @staticmethod
    def prepare(v):
        x, y = v.stable_view("x"), v.stable_view("y")
        return None if x is None or y is None else Doubled(x, y)


def _program(between: str = "") -> tuple[poplar.Graph, poplar.Device, poplar.Program]:
    """``b = 2 a`` then ``c = 2 b`` (two compute sets), optionally with a copy of ``a``
    into ``d`` or a host read of ``b`` between them."""
    g, dev = new_graph()
    g.add_codelets([Double])
    a = var(g, 8, tile=0, write="a")
    b, c, d = (var(g, 8, tile=1, read=name) for name in ("b", "c", "d"))
    steps: list[poplar.Program] = []
    for src, dst, name in ((a, b, "first"), (b, c, "second")):
        cs = g.add_compute_set(name)
        g.add_vertex(cs, "Double", {"x": src, "y": dst}, tile=1)
        steps.append(poplar.Execute(cs))
    if between == "copy":
        steps.insert(1, poplar.Copy(a, d))
    elif between == "stream":
        steps.insert(1, poplar.Copy(b, g.add_device_to_host_fifo("out", poplar.FLOAT, 8)))
    return g, dev, poplar.Sequence(steps)


def _run(between: str = "", options: dict | None = None) -> tuple[list, str]:
    FUSED.clear()
    g, dev, prog = _program(between)
    engine = make_engine(g, [prog], options or {}, dev)
    if between == "stream":
        engine.connect_stream("out", np.zeros(8, np.float32))
    got = []
    for i in range(RUNS):
        engine.write_tensor("a", np.arange(8, dtype=np.float32) + i)
        engine.run(0)
        got.append([engine.read_tensor(n).tolist() for n in ("b", "c", "d")])
    want = [[list(2.0 * (np.arange(8) + i)), list(4.0 * (np.arange(8) + i))] for i in range(RUNS)]
    assert [r[:2] for r in got] == want
    return got, json.dumps(engine.get_execution_profile(), sort_keys=True)


def test_consecutive_prepared_runs_fuse_in_replayed_runs(monkeypatch):
    """The two compute sets run as one call in the replayed runs (not in the interpreter's
    first ones), with the numbers and profile of the runs apart."""
    got, profile = _run()
    assert 0 < len(FUSED) < RUNS  # replayed runs only
    (first, second), *_ = FUSED
    assert set(FUSED) == {(first, second)} and first != second
    monkeypatch.setattr(Doubled, "fuse_next", lambda self, after: None)
    assert _run() == (got, profile)
    assert FUSED == []


def test_a_data_effect_between_keeps_them_apart():
    """A copy or a stream transfer between the compute sets: no fusion."""
    for between in ("copy", "stream"):
        _run(between)
        assert FUSED == [], between


def test_host_time_keeps_them_apart(tmp_path):
    """With ``autoReport.outputHostTime`` each compute set is timed alone: no fusion, and
    the profile is the one without host time."""
    _, fused_profile = _run()
    options = {"autoReport.outputHostTime": "true", "autoReport.directory": str(tmp_path)}
    _, timed_profile = _run(options=options)
    assert FUSED == []
    assert timed_profile == fused_profile
