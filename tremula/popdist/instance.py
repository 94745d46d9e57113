"""One instance of a PopRun job: ``python -m tremula.popdist.instance program [args]``.

poprun runs every Python program through this runner (``program`` as mpi4py's runner takes
it: ``file.py``, ``-m module``, ``-c code`` or ``-``). In a job of several instances it starts
MPI and the PopDist backend *before* the program's first line, so every instance is an MPI
process from the start and Open MPI's rules end the job whenever one ends early:

* an uncaught exception (or ``sys.exit`` with a non-zero status): the instance says how it
  ended, waiting instances say where they waited, and mpi4py's ``MPI_Abort`` ends the job
  with the instance's exit status;
* a normal end while others wait in a collective call: they name it and abort the job;
* a signal or ``os._exit``: the process never finalises MPI, which mpirun treats as an
  abnormal end: it names the instance and how it ended, and ends the job with its status.

Without the runner, an instance that returned before its first PopDist call left the others
waiting in MPI's start-up for it forever: mpirun lets a process that never started MPI end
quietly, and MPI's start-up has no time limit (Open MPI's ``pmix_base_exchange_timeout`` does
not reach its fence). What is left of that gap (a process ending with status 0 before or
inside MPI's start-up, which only code run before the program can do) is closed by a guard
thread while MPI starts: it ends the job when one of the instances (the launcher's other
children of this job) is gone, or when start-up outlasts the collective time-out. A job of
one instance starts no MPI here.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Sequence
from types import TracebackType

USAGE = "usage: python -m tremula.popdist.instance (file.py | -m module | -c code | -) [args]"


def _status(exc: BaseException) -> int:
    """The exit status Python gives an exception that ends the program."""
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None:
            return 0
        return code if isinstance(code, int) else 1
    if isinstance(exc, KeyboardInterrupt):
        return 130
    return 1


def _how(exc: BaseException, status: int) -> str:
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r})" if status else "finished the program"
    if isinstance(exc, KeyboardInterrupt):
        return "was interrupted (KeyboardInterrupt)"
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"raised {type(exc).__name__}" + (f": {text}" if text else "")


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``argv`` (default ``sys.argv[1:]``) as this instance's program."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or (args[0] in ("-m", "-c") and len(args) < 2):
        print(USAGE, file=sys.stderr)
        raise SystemExit(2)
    from tremula.popdist import backend, env

    layout = env.layout()
    several = layout.num_instances > 1
    if several:
        guard = _StartUpGuard(layout.instance_index, layout.num_instances, env.collective_timeout())
        backend.initialize()
        guard.stop()
        backend.report_stops()
    from mpi4py import run as mpi4py_run  # the runner only; MPI is not imported by it

    try:
        mpi4py_run.run_command_line(args)
    except BaseException as exc:
        status = _status(exc)
        if several:
            backend.set_exit(status, _how(exc, status))
        # mpi4py aborts the job with this status at exit (after the backend's handler)
        mpi4py_run.set_abort_status(exc if isinstance(exc, SystemExit) else status)
        if isinstance(exc, SystemExit):
            raise
        # the program's traceback, without the runner's frames above it
        tb = _program_frames(exc.__traceback__)
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        raise SystemExit(status) from None


def _program_frames(tb: TracebackType | None) -> TracebackType | None:
    runner = {__file__, mpi4py_run_file()}
    while tb is not None and (
        tb.tb_frame.f_code.co_filename in runner
        or tb.tb_frame.f_code.co_filename.startswith("<frozen runpy")
        or tb.tb_frame.f_globals.get("__name__") == "runpy"
    ):
        tb = tb.tb_next
    return tb


def mpi4py_run_file() -> str:
    from mpi4py import run as mpi4py_run

    return str(mpi4py_run.__file__)


class _StartUpGuard:
    """A forked process that ends the job (killing this instance: mpirun then stops every
    instance) when MPI's start-up waits for an instance that is gone, or for longer than
    the collective time-out. A process, not a thread: MPI's start-up holds Python's GIL."""

    def __init__(self, me: int, count: int, timeout: float) -> None:
        instance, launcher = os.getpid(), os.getppid()
        read, self._write = os.pipe()
        self._pid = os.fork()
        if self._pid == 0:  # the guard
            os.close(self._write)
            try:
                _guard(read, (instance, launcher), me, count, timeout)
            finally:
                os._exit(0)
        os.close(read)

    def stop(self) -> None:
        os.close(self._write)  # the guard sees the pipe close and leaves
        os.waitpid(self._pid, 0)


def _guard(read: int, pids: tuple[int, int], me: int, count: int, timeout: float) -> None:
    import select

    instance, launcher = pids
    begin = time.monotonic()
    missing_before: set[int] = set()
    while not select.select([read], [], [], 0.2)[0]:
        running = _running_instances(launcher)
        missing = set() if running is None else set(range(count)) - running
        gone = missing & missing_before  # missing twice in a row: not a race with its start
        missing_before = missing
        waited = time.monotonic() - begin
        if gone:
            why = (
                f"instance {min(gone)} ended before starting MPI, with exit status 0 (mpirun "
                f"lets a process that never started MPI end quietly)"
            )
        elif waited > timeout:
            why = f"they did not all start MPI within the collective time-out ({timeout:g} s)"
        else:
            continue
        print(
            f"PopDist: instance {me} waited {waited:.1f} s in MPI start-up for the other "
            f"instances, but {why}. Ending the job.",
            file=sys.stderr,
            flush=True,
        )
        os.kill(instance, signal.SIGKILL)
        return


def _running_instances(parent: int) -> set[int] | None:
    """The MPI ranks of this job's instances still running (the processes that mpirun,
    ``parent``, started in this namespace); None where ``/proc`` cannot tell."""
    namespace = os.environ.get("PMIX_NAMESPACE")
    if namespace is None:
        return None
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    ranks = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if fields[0] == b"Z" or int(fields[1]) != parent:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = dict(
                    item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item
                )
        except (OSError, IndexError, ValueError):
            continue
        if environ.get(b"PMIX_NAMESPACE") == namespace.encode():
            rank = environ.get(b"OMPI_COMM_WORLD_RANK")
            if rank is not None and rank.isdigit():
                ranks.add(int(rank))
    return ranks


if __name__ == "__main__":
    main()
