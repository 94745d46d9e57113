"""Run Graphcore's PopXL model test suites on Tremula, as Graphcore ran them.

Each model's tests run from the model's folder, one pytest per test file, with
``PYTHONPATH=<model folder>:<popxl-addons>:<examples-utils>:<graphcore-examples>/utils`` (the
clients README) and Tremula's root last, so that ``import popxl`` resolves to Tremula. The
clients are found through ``$TREMULA_CLIENTS`` (``tools/clients.py``). Prints each file's
result and time, the totals, and compares the failures with the expected-failures list
(``tests/clients/known_failures.txt``): the exit status is 1 on a failure not in the list (on
any failure with ``--strict``), 2 when the clients are absent, else 0. Listed tests that
now pass are reported, to be removed from the list.

A model whose configuration module this Python refuses (the models' config dataclasses use
dataclass instances as field defaults, which Python 3.11 and later refuse: 3.12 and 3.13 as
3.11) is detected by importing it, and reported as not run on this Python rather than as
failures.

    python tools/run_client_suites.py                      # both models, this Python
    python tools/run_client_suites.py --models bert -k attention
    python tools/run_client_suites.py --strict             # every failure fails

Run it with the Python (and its environment, the ``test`` and ``models`` extras) to test.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import clients

ROOT = clients.ROOT
KNOWN_FAILURES = ROOT / "tests" / "clients" / "known_failures.txt"
#: model name: its folder in graphcore-examples
MODELS = {"gpt_j": "nlp/gpt_j/popxl", "bert": "nlp/bert/popxl"}
#: test files (model/path in the model folder) never run here, each with why: they reach a
#: model hub (Hugging Face), which no machine of the project can reach
DESELECTED = {
    # not a test (no test function: a fine-tuning script run by hand), and it downloads the
    # tokenizer EleutherAI/gpt-j-6b and the GLUE MNLI data set (`datasets`) from the hub
    "gpt_j/tests/integration/execution/test_overfitting.py": (
        "downloads the EleutherAI/gpt-j-6b tokenizer and GLUE MNLI from a model hub"
    ),
}
#: what Python >= 3.11 says of a dataclass instance used as a field default
REFUSED_DEFAULT = ("mutable default", "use default_factory")


@dataclass
class Case:
    """One test's outcome: ``passed``, ``failed``, ``error`` or ``skipped``."""

    id: str
    outcome: str
    message: str = ""


@dataclass
class FileRun:
    """One test file's run."""

    id: str
    seconds: float = 0.0
    cases: list[Case] = field(default_factory=list)
    note: str = ""  # why it did not run, or why no test was reported

    def count(self) -> Counter[str]:
        return Counter(c.outcome for c in self.cases)


def client_paths() -> dict[str, Path]:
    lookup = clients.find("graphcore-examples", "popxl-addons", "examples-utils")
    if lookup.missing:
        print(f"run_client_suites: {lookup.message}", file=sys.stderr)
        raise SystemExit(2)
    return lookup.paths


def environment(model_dir: Path, paths: dict[str, Path], python: str) -> dict[str, str]:
    """The environment Graphcore's tests ran in, with Tremula's root last on the path and
    ``python``'s folder first on PATH (the execution tests start ``python3``)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        str(p)
        for p in (
            model_dir,
            paths["popxl-addons"],
            paths["examples-utils"],
            paths["graphcore-examples"] / "utils",
            ROOT,
        )
    )
    env["PATH"] = os.pathsep.join([str(Path(python).parent), env.get("PATH", "")])
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # the clients are read-only
    env.pop("POPLAR_ENGINE_OPTIONS", None)
    return env


def refused_by_python(model_dir: Path, env: dict[str, str], python: str) -> str:
    """Why this Python refuses the model's configuration module ("" if it imports it, or
    fails for another reason, which its tests then report)."""
    probe = subprocess.run(
        [python, "-c", "import config"],
        cwd=model_dir,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = probe.stderr.strip().splitlines()
    last = lines[-1] if lines else ""
    if probe.returncode and all(s in last for s in REFUSED_DEFAULT):
        version = subprocess.run(
            [python, "-c", "import platform; print(platform.python_version())"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        return f"Python {version} refuses its configuration dataclasses ({last})"
    return ""


def _node_id(file_id: str, module: str, classname: str, name: str) -> str:
    """A test's id (``model/path::Class::name``) from a JUnit test case of ``file_id``."""
    if not classname:  # a collection error: the file itself
        return file_id
    rest = classname[len(module) + 1 :] if classname.startswith(module + ".") else ""
    return "::".join([file_id, *([rest.replace(".", "::")] if rest else []), name])


#: a traceback's line naming an exception (``E   ImportError: ...`` in pytest's report)
EXCEPTION_LINE = re.compile(r"^E\s+((?:\w+\.)*\w*(?:Error|Exception|Exit|Interrupt)\b.*)$")


def _reason(element: ET.Element) -> str:
    """A failure's one-line reason: the last exception its report names (a subprocess's
    included), else the first line of its message."""
    text = element.text or ""
    named = [m.group(1) for m in map(EXCEPTION_LINE.match, text.splitlines()) if m]
    lines = (element.get("message") or text).strip().splitlines()
    return (named[-1] if named else lines[0] if lines else "")[:300]


def read_junit(path: Path, file_id: str, module: str) -> list[Case]:
    cases = []
    for tc in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            found = tc.find(tag)
            if found is not None:
                outcome, message = {"failure": "failed"}.get(tag, tag), _reason(found)
                break
        node = _node_id(file_id, module, tc.get("classname", ""), tc.get("name", ""))
        cases.append(Case(node, outcome, message))
    return cases


def _pytest(cmd: list[str], cwd: Path, env: dict[str, str], log: Path, timeout: float) -> int:
    """Run ``cmd`` in its own process group (its children ended with it on a timeout),
    output into ``log``; its exit status, -1 on a timeout."""
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return -1


def run_file(
    model: str, model_dir: Path, test: Path, env: dict[str, str], args: argparse.Namespace
) -> FileRun:
    rel = test.relative_to(model_dir)
    run = FileRun(f"{model}/{rel.as_posix()}")
    module = ".".join(rel.with_suffix("").parts)
    junit = Path(args.log_dir) / (run.id.replace("/", "__") + ".xml")
    log = junit.with_suffix(".log")
    cmd = [args.python, "-m", "pytest", str(rel), "-p", "no:cacheprovider", "-rA", "-v"]
    cmd += [f"--junitxml={junit}", *(["-k", args.k] if args.k else [])]
    start = time.perf_counter()
    code = _pytest(cmd, model_dir, env, log, args.timeout)
    run.seconds = time.perf_counter() - start
    if junit.exists():
        run.cases = read_junit(junit, run.id, module)
    failing = any(c.outcome in ("failed", "error") for c in run.cases)
    if code == -1:
        run.cases.append(Case(run.id, "error", f"timed out after {args.timeout:.0f} s"))
    elif code not in (0, 5) and not failing:  # pytest stopped without reporting a test
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        run.cases.append(Case(run.id, "error", f"pytest exit {code}: {tail[0][:300]}"))
    elif not run.cases:
        run.note = "no test collected"
    return run


def run_model(model: str, paths: dict[str, Path], args: argparse.Namespace) -> list[FileRun]:
    model_dir = paths["graphcore-examples"] / MODELS[model]
    env = environment(model_dir, paths, args.python)
    files = sorted((model_dir / "tests").rglob("test_*.py"))
    refused = refused_by_python(model_dir, env, args.python)
    if refused:
        print(f"  not run: {refused}", flush=True)
    runs = []
    for test in files:
        file_id = f"{model}/{test.relative_to(model_dir).as_posix()}"
        if file_id in DESELECTED:
            runs.append(FileRun(file_id, note=f"deselected: {DESELECTED[file_id]}"))
        elif refused:
            runs.append(FileRun(file_id, note="not run on this Python (above)"))
        else:
            runs.append(run_file(model, model_dir, test, env, args))
        print_file(runs[-1])
    return runs


def print_file(run: FileRun) -> None:
    n = run.count()
    bad = n["failed"] + n["error"]
    if run.note and not run.cases:
        print(f"  ---- {run.id}: {run.note}", flush=True)
        return
    status = "FAIL" if bad else "ok  "
    counts = f"{n['passed']} passed, {bad} failed, {n['skipped']} skipped"
    print(f"  {status} {run.id}: {counts} in {run.seconds:.1f} s", flush=True)
    for case in run.cases:
        if case.outcome in ("failed", "error"):
            print(f"         {case.id}: {case.message}", flush=True)


def read_known(path: Path) -> dict[str, str]:
    """The expected failures: ``<test id> # <reason>`` a line (``#`` lines are comments)."""
    known: dict[str, str] = {}
    if not path.exists():
        return known
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        test, sep, reason = line.partition(" # ")
        if not sep or not reason.strip() or " " in test.strip():
            raise SystemExit(f"{path}:{number}: expected '<test id> # <reason>', got {raw!r}")
        known[test.strip()] = reason.strip()
    return known


def is_known(test: str, known: dict[str, str]) -> bool:
    """Whether ``test`` is listed, or its file is (a file listed for failing as a whole)."""
    return test in known or test.split("::")[0] in known


def _now_passes(listed: str, cases: list[Case], ran: set[str]) -> bool:
    """Whether a listed test ran and passed (a listed file: ran with no failure)."""
    if "::" in listed:
        return any(c.id == listed and c.outcome == "passed" for c in cases)
    return listed in ran and not any(
        c.id.split("::")[0] == listed and c.outcome in ("failed", "error") for c in cases
    )


def verdict(runs: list[FileRun], known: dict[str, str], strict: bool) -> int:
    cases = [c for r in runs for c in r.cases]
    total = Counter(c.outcome for c in cases)
    failed = [c for c in cases if c.outcome in ("failed", "error")]
    new = failed if strict else [c for c in failed if not is_known(c.id, known)]
    ran = {r.id for r in runs if r.cases}
    fixed = [t for t in known if _now_passes(t, cases, ran)]
    seconds = sum(r.seconds for r in runs)
    not_run = [r for r in runs if not r.cases]
    print(f"\nclient suites: {len(ran)} files run in {seconds:.0f} s, {len(not_run)} not run")
    for case in new:
        print(f"  NEW FAILURE {case.id}: {case.message}")
    for test in fixed:
        print(f"  NOW PASSES (remove it from the expected failures): {test}")
    kind = "failures (strict)" if strict else "new failures"
    known_n = len(failed) - len(new)
    print(f"known failures: {known_n}, {kind}: {len(new)}, now passing: {len(fixed)}")
    # the expected failures named in the totals line, so that it never reads as a plain
    # "N passed, N failed" verdict: the verdict is the exit status
    print(
        f"clients: {total['passed']} passed, {len(failed)} failed ({known_n} expected, "
        f"{len(new)} {'failing' if strict else 'new'}), {total['skipped']} skipped"
    )
    return 1 if new else 0


def record(path: Path, runs: list[FileRun]) -> None:
    """Write this run's failures as the expected-failures list (its ``#`` header kept)."""
    head = [ln for ln in (path.read_text().splitlines() if path.exists() else []) if ln[:1] == "#"]
    failed = [c for r in runs for c in r.cases if c.outcome in ("failed", "error")]
    lines = [f"{c.id} # {' '.join(c.message.split())[:160] or 'failed'}" for c in failed]
    path.write_text("\n".join([*head, *lines]) + "\n")
    print(f"wrote {len(lines)} expected failures to {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS))
    parser.add_argument("--python", default=sys.executable, help="the Python to test with")
    parser.add_argument("--known", type=Path, default=KNOWN_FAILURES)
    parser.add_argument("--strict", action="store_true", help="fail on every failure")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per test file")
    parser.add_argument("-k", help="pytest's -k, passed to every file's run")
    parser.add_argument("--log-dir", help="where each file's log and JUnit XML go")
    parser.add_argument(
        "--record", action="store_true", help="write this run's failures to the --known list"
    )
    args = parser.parse_args(argv)
    known = read_known(args.known)
    paths = client_paths()
    with tempfile.TemporaryDirectory(prefix="client-suites-") as tmp:
        args.log_dir = args.log_dir or tmp
        Path(args.log_dir).mkdir(parents=True, exist_ok=True)
        runs = []
        for model in args.models:
            print(f"{model} ({MODELS[model]}), {args.python}:", flush=True)
            runs += run_model(model, paths, args)
        if args.record:
            record(args.known, runs)
            known = read_known(args.known)
        return verdict(runs, known, args.strict)


if __name__ == "__main__":
    sys.exit(main())
