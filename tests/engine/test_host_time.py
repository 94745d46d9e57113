"""Host time per step (engine option ``autoReport.outputHostTime``, ``tremula profile
summary --host-time``): counted for every run of every step, through the replayed plan of a
static program and through the interpreter alike, written apart from the profiles, which
stay byte for byte what they are without it."""

from __future__ import annotations

import json

import numpy as np
from tremula_tests_engine_codelets import increment, make_engine, new_graph, var

from tremula import poplar
from tremula.profile.cli import main as profile_main
from tremula.profile.hosttime import HOST_TIME_FILE, read_host_time

RUNS = 3


def _run(folder, host_time: bool) -> np.ndarray:
    """Program 0 (static): ``a`` += 1 four times in a loop, then ``b`` += 2; program 1
    branches on data (through the interpreter): ``b`` += 5 when ``p``. Both run ``RUNS``
    times; returns what ``a`` and ``b`` read."""
    g, dev = new_graph()
    a = var(g, 4, tile=None, dtype=poplar.INT, read="a")
    b = var(g, 4, tile=1, dtype=poplar.INT, read="b")
    p = var(g, (), tile=0, dtype=poplar.INT, write="p")
    static = poplar.Sequence(
        [poplar.Repeat(4, increment(g, a, name="loop_inc")), increment(g, b, 2, 1, "add_two")]
    )
    branch = poplar.If(p, increment(g, b, 5, 1, "add_five"))
    options = {"autoReport.all": "true", "autoReport.directory": str(folder)}
    if host_time:
        options["autoReport.outputHostTime"] = "true"
    e = make_engine(g, [static, branch], options, dev)
    e.write_tensor("p", np.array(1, np.int32))
    for _ in range(RUNS):
        e.run(0)
        e.run(1)
    out = np.concatenate([e.read_tensor("a"), e.read_tensor("b")])
    e.close()
    return out


def test_host_time_counts_every_run_and_leaves_the_profiles_as_they_are(tmp_path):
    plain, timed = tmp_path / "plain", tmp_path / "timed"
    want = _run(plain, host_time=False)
    np.testing.assert_array_equal(_run(timed, host_time=True), want)
    np.testing.assert_array_equal(want, [4 * RUNS] * 4 + [7 * RUNS] * 4)
    for name in ("graph.json", "execution.json"):
        assert (plain / name).read_bytes() == (timed / name).read_bytes()
    assert not (plain / HOST_TIME_FILE).exists()
    doc = read_host_time(timed)
    steps = {(s["type"], s["name"]): s for s in doc["steps"]}
    calls = {key[1]: s["calls"] for key, s in steps.items() if key[0] == "OnTileExecute"}
    assert calls == {"loop_inc": 4 * RUNS, "add_two": RUNS, "add_five": RUNS}
    assert all(s["seconds"] >= 0 for s in doc["steps"])
    assert json.loads((timed / HOST_TIME_FILE).read_text()) == doc


def test_summary_ranks_the_steps_by_host_time(tmp_path, capsys):
    _run(tmp_path, host_time=True)
    doc = read_host_time(tmp_path)
    doc["steps"] = [  # known times: the ranking, shares and means are hand-computed
        {"type": "OnTileExecute", "name": "slow", "calls": 4, "seconds": 0.003},
        {"type": "OnTileExecute", "name": "fast", "calls": 2, "seconds": 0.001},
    ]
    (tmp_path / HOST_TIME_FILE).write_text(json.dumps(doc))
    assert profile_main(["summary", str(tmp_path), "--host-time", "1"]) == 0
    out = capsys.readouterr().out
    section = out[out.index("Host time:") :]
    assert "4.000 ms (6 calls of 2 steps)" in section
    assert "OnTileExecute: slow:" in section and "75.0%  4 x 750.0 us" in section
    assert "(1 more steps):" in section and "1.000 ms" in section
    assert "fast" not in section
    assert profile_main(["summary", str(tmp_path)]) == 0  # off unless asked
    assert "Host time:" not in capsys.readouterr().out


def test_summary_without_host_time_says_which_option_writes_it(tmp_path, capsys):
    _run(tmp_path, host_time=False)
    assert profile_main(["summary", str(tmp_path), "--host-time"]) == 1
    assert "autoReport.outputHostTime" in capsys.readouterr().err
