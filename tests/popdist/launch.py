"""Running ``tremula poprun`` from the tests: through the real mpirun, with a time limit (a
hung job fails the test instead of the suite)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).with_name("programs")
_TAG = re.compile(r"^\[1,(\d+)\]<(stdout|stderr)>:(.*)$")


@dataclass
class Job:
    rc: int
    stdout: str
    stderr: str
    seconds: float

    def lines(self, instance: int, stream: str = "stdout") -> list[str]:
        """Instance ``instance``'s lines of ``stream`` (tags removed)."""
        text = self.stdout if stream == "stdout" else self.stderr
        out = []
        for line in text.splitlines():
            m = _TAG.match(line)
            if m and int(m.group(1)) == instance and m.group(2) == stream:
                out.append(m.group(3))
        return out


def poprun(*args: str, timeout: float = 240, env: dict[str, str] | None = None) -> Job:
    """``python -m tremula.cli poprun *args`` with this tree first on the path (and the
    variables of ``env`` set)."""
    environ = dict(os.environ, **(env or {}))
    # instances share compiled bytecode (else each compiles every module it imports)
    environ.pop("PYTHONDONTWRITEBYTECODE", None)
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [environ.get("PYTHONPATH")])])
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "tremula.cli", "poprun", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environ,
        cwd=ROOT,
    )
    return Job(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


def program(name: str) -> str:
    return str(PROGRAMS / name)
