"""Determinism across checkouts: the same program, run from two directories whose paths
differ in length (so that everything allocated after the path differs in address), gives
the same numbers and byte-identical profiles (the user's file path reaches op debug info;
nothing may order, key or cache by it or by object addresses)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: a replicated GRU and dense layer (the char-GRU example's kind of program, small); prints
#: its outputs and, per replica, the largest difference from the CPU device
PROGRAM = r"""
import json, sys
import numpy as np
import popxl
import popxl.ops as ops

T, B, I, H, N = 12, 16, 256, 32, 16
rng = np.random.default_rng(0)
init = {
    "wi": rng.uniform(-0.1, 0.1, (3, I, H)).astype(np.float32),
    "wo": rng.uniform(-0.2, 0.2, (3, H, H)).astype(np.float32),
    "b": rng.uniform(-0.1, 0.1, (3, H)).astype(np.float32),
    "d": rng.uniform(-0.05, 0.05, (T * H, N)).astype(np.float32),
}
x = rng.standard_normal((2, T, B, I)).astype(np.float32)


def run(replicas, device, data):
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        xs = popxl.h2d_stream((T, B, I), popxl.float32, "x")
        ys = popxl.d2h_stream((B, N), popxl.float32, "y")
        w = {k: popxl.variable(v, name=k) for k, v in init.items()}
        h0 = ops.init((B, H), popxl.float32, "h0")
        y = ops.rnn.gru(ops.host_load(xs, "x"), h0, w["wi"], w["wo"], w["b"])
        y = ops.reshape(ops.transpose(y, (1, 0, 2)), (B, T * H))
        ops.host_store(ys, y @ w["d"])
    with popxl.Session(ir, device) as s:
        return s.run({xs: data})[ys]


out = run(2, "ipu_model", x)
ref = [run(1, "cpu", x[r]) for r in range(2)]
err = [float(np.abs(out[r] - ref[r]).max()) for r in range(2)]
print(json.dumps({"out": out.tobytes().hex(), "err": err}))
"""


def _run_from(directory: Path) -> tuple[dict, dict[str, str]]:
    directory.mkdir(parents=True)
    script = directory / "program.py"
    script.write_text(PROGRAM)
    reports = directory / "reports"
    opts = {"autoReport.all": "true", "autoReport.directory": str(reports)}
    env = dict(os.environ, PYTHONPATH=str(ROOT), POPLAR_ENGINE_OPTIONS=json.dumps(opts))
    res = subprocess.run(
        [sys.executable, str(script)], cwd=directory, env=env, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr[-3000:]
    profiles = {
        str(p.relative_to(reports)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(reports.rglob("*.json"))
    }
    return json.loads(res.stdout.strip().splitlines()[-1]), profiles


def test_same_numbers_and_profiles_from_two_paths(tmp_path: Path) -> None:
    short, short_profiles = _run_from(tmp_path / "a")
    long, long_profiles = _run_from(tmp_path / ("checkout_" + "x" * 70) / "nested")
    assert max(short["err"]) < 1e-5, short["err"]  # the IPU Model's replicas = the CPU's
    assert short["out"] == long["out"]
    assert short_profiles and short_profiles == long_profiles
