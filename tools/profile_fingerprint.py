"""Fingerprint the profiles and outputs of the user-facing programs, to prove a refactor
changes nothing.

Runs every program a new user starts from (the README's Poplar program, every script in
``examples/``, ``tremula demo`` in every profiler mode and ``tremula train`` on the IPU Model
and the CPU), each in its own process, records every
``poplar.Engine`` the program creates, and writes each engine's ``graph.json`` /
``execution.json`` through ``Engine.write_report``. Prints, per program, the SHA-256 of the
program's standard output and of every profile file, with a few key numbers (total cycles,
total memory, steps) so that a difference is easy to place.

    python tools/profile_fingerprint.py                 # print the fingerprint
    python tools/profile_fingerprint.py --save a.json   # and store it
    python tools/profile_fingerprint.py --check a.json  # compare with a stored one (exit 1
                                                        # and name what differs)

Run from the repository root with ``PYTHONPATH=$PWD``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import clients  # tools/clients.py: where client code is ($TREMULA_CLIENTS)

from tremula.engine.options import MODES as ENGINE_MODES

ROOT = Path(__file__).resolve().parents[1]
#: the profiler modes besides the default, each run on the demo
MODES = tuple(mode for mode in ENGINE_MODES if mode != "ipu_model")

#: run inside the child process: record engines, run the program, write their profiles
_CHILD = r"""
import contextlib, hashlib, io, json, os, re, runpy, sys
import numpy as np
from tremula.engine import engine as _engine

engines = []
_init = _engine.Engine.__init__
def _record(self, *a, **k):
    _init(self, *a, **k)
    engines.append(self)
_engine.Engine.__init__ = _record

kind, target, outdir = sys.argv[1], sys.argv[2], sys.argv[3]
sys.argv = [target]  # a script parses its own (empty) command line
out = io.StringIO()
with contextlib.redirect_stdout(out):
    if kind == "script":
        runpy.run_path(target, run_name="__main__")
    elif kind == "code":
        exec(compile(open(target).read(), target, "exec"), {"__name__": "__main__"})
    elif kind == "demo":
        from tremula.demo import build_and_run, main
        if target:  # one profiler mode
            build_and_run(64, options={"debug.executionProfile": target}).engine.run(0)
        else:
            main(64, None, False)
    elif kind == "train":
        from tremula.digits import main
        epochs, device = target.split(",")
        main(int(epochs), device, device != "cpu")
text = re.sub(r"\d+(\.\d+)? s\b", "<wall time>", out.getvalue())  # timings printed
result = {"stdout": hashlib.sha256(text.encode()).hexdigest(), "engines": []}
for i, e in enumerate(engines):
    d = os.path.join(outdir, f"engine{i}")
    e.write_report(d)
    entry = {"files": {}}
    for name in sorted(os.listdir(d)):
        data = open(os.path.join(d, name), "rb").read()
        entry["files"][name] = hashlib.sha256(data).hexdigest()
    g = e.get_graph_profile()
    entry["totalMemory"] = int(sum(g["memory"]["byTile"]["total"]))
    if e._runtime is not None:
        x = e.get_execution_profile()
        sim = x.get("simulation", {})
        entry["cycles"] = int(sim.get("cycles", 0))
        entry["steps"] = len(sim.get("steps", []))
    result["engines"].append(entry)
print(json.dumps(result))
"""


def readme_programs(tmp: Path) -> list[tuple[str, str, str]]:
    """The README's self-contained Python blocks (those that build a device themselves)."""
    text = (ROOT / "README.md").read_text()
    out = []
    for i, block in enumerate(re.findall(r"```python\n(.*?)```", text, re.S)):
        if "create_device()" in block and "engine.run" in block:
            path = tmp / f"readme_{i}.py"
            path.write_text(block)
            out.append((f"README block {i}", "code", str(path)))
    return out


def programs(tmp: Path, epochs: int) -> list[tuple[str, str, str]]:
    progs = readme_programs(tmp)
    for path in sorted((ROOT / "examples").rglob("*.py")):
        if path.parent.name == "distributed":  # run under tremula poprun (tests/popdist)
            continue
        progs.append((str(path.relative_to(ROOT)), "script", str(path)))
    progs.append(("tremula demo --tiles 64", "demo", ""))
    for mode in MODES:
        progs.append((f"demo, debug.executionProfile={mode}", "demo", mode))
    for device in ("ipu_model", "cpu"):
        progs.append(
            (f"tremula train --epochs {epochs} --device {device}", "train", f"{epochs},{device}")
        )
    return progs


def run_one(kind: str, target: str, workdir: Path) -> dict[str, Any]:
    # examples on Graphcore's popxl-addons import it, unmodified, from the clients folder
    addons = clients.find("popxl-addons")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(addons["popxl-addons"])]))
    env.pop("POPLAR_ENGINE_OPTIONS", None)
    res = subprocess.run(
        [sys.executable, "-c", _CHILD, kind, target, str(workdir)],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode:
        raise SystemExit(f"{kind} {target} failed:\n{res.stderr[-4000:]}\n{addons.message}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def fingerprint(epochs: int) -> dict[str, Any]:
    result = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for label, kind, target in programs(tmp, epochs):
            work = tmp / re.sub(r"\W+", "_", label)
            work.mkdir()
            result[label] = run_one(kind, target, work)
            print(f"{label}: {_line(result[label])}", flush=True)
    return result


def _line(r: dict[str, Any]) -> str:
    parts = [f"stdout {r['stdout'][:12]}"]
    for i, e in enumerate(r["engines"]):
        files = " ".join(f"{k} {v[:12]}" for k, v in e["files"].items())
        nums = f"mem {e['totalMemory']} cycles {e.get('cycles', '-')} steps {e.get('steps', '-')}"
        parts.append(f"[{i}] {files} {nums}")
    return "; ".join(parts)


def digest(result: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(result, sort_keys=True).encode()).hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--save", metavar="FILE", help="store the fingerprint as JSON")
    ap.add_argument("--check", metavar="FILE", help="compare with a stored fingerprint")
    ap.add_argument("--epochs", type=int, default=1, help="epochs of `tremula train`")
    args = ap.parse_args()
    result = fingerprint(args.epochs)
    print(f"digest: {digest(result)}")
    if args.save:
        Path(args.save).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    if args.check:
        ref = json.loads(Path(args.check).read_text())
        bad = [k for k in sorted(set(ref) | set(result)) if ref.get(k) != result.get(k)]
        for k in bad:
            print(f"DIFFERS: {k}\n  was: {_line(ref[k]) if k in ref else '-'}")
            print(f"  now: {_line(result[k]) if k in result else '-'}")
        print("identical" if not bad else f"{len(bad)} program(s) differ")
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
