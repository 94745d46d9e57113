"""Every way an instance can end early ends the whole PopRun job at once (issue 30): a
normal end, ``sys.exit`` with a status, an uncaught exception, a signal and ``os._exit``,
before, during and after MPI's start-up. Each case launches a real job of 2 instances with
the default collective time-out (300 s), so that a job ending within seconds shows the end
was seen, not timed out; poprun's exit status is the first failing instance's.
"""

from __future__ import annotations

import os

import pytest
from tremula_tests_popdist_launch import PROGRAMS, poprun, program

#: seconds within which an ended instance must have ended the job (a hang would wait for
#: the 300 s collective time-out, or forever)
PROMPT = 30
WAIT = "instance 0 waited in broadcast (collective call #{n}) for the other instances, but "
#: what a waiting instance says when mpirun stops it (the ended instance named by mpirun)
STOPPED = (
    "PopDist: instance 0 was stopped (SIGTERM: mpirun ends the job when an instance ends, "
    "or poprun was stopped) while it waited for the other instances in broadcast (collective "
    "call #2)"
)


def _job(how: str, when: str, startup: str | None = None, collective_timeout: int | None = None):
    """A job of 2 instances running ``ending.py how when``. ``startup``: how instance 1 ends
    in or before MPI's start-up (``TREMULA_TEST_END``, read by the ``startup`` hook put on
    the path); ``collective_timeout``: poprun's ``--collective-timeout`` (default 300 s)."""
    args = ["--num-instances", "2"]
    if collective_timeout is not None:
        args += ["--collective-timeout", str(collective_timeout)]
    env = None
    if startup is not None:
        path = [str(PROGRAMS / "startup"), os.environ.get("PYTHONPATH", "")]
        env = {"TREMULA_TEST_END": startup, "PYTHONPATH": os.pathsep.join(path)}
    return poprun(*args, program("ending.py"), how, when, timeout=120, env=env)


def _check(job, rc: int, *messages: str) -> None:
    text = job.stdout + job.stderr
    assert job.rc == rc, text[-3000:]
    for message in messages:
        assert message in text, text[-3000:]
    assert "second call" not in job.stdout
    assert job.seconds < PROMPT, job.seconds


@pytest.mark.parametrize(
    ("how", "when", "rc", "messages"),
    [
        # the hang: instance 1 returns before its first PopDist call
        (
            "return",
            "first",
            1,
            [WAIT.format(n=1) + "instance 1 finished the program (exit status 0)"],
        ),
        (
            "exit3",
            "first",
            3,
            [
                "PopDist: instance 1 called sys.exit(3) (exit status 3); ending the job",
                WAIT.format(n=1) + "instance 1 ended with exit status 3",
            ],
        ),
        (
            "raise",
            "first",
            1,
            [
                "RuntimeError: instance 1 failed on purpose",
                "PopDist: instance 1 raised RuntimeError: instance 1 failed on purpose "
                "(exit status 1)",
                WAIT.format(n=1) + "instance 1 ended with exit status 1",
            ],
        ),
        ("return", "after", 1, [WAIT.format(n=2) + "instance 1 finished the program"]),
        ("kill", "after", 137, ["process rank 1", "signal 9", STOPPED]),
        ("os._exit", "after", 1, ["process rank 1", "exiting\nimproperly", STOPPED]),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 10 else "",
)
def test_an_instance_that_ends_in_the_program_ends_the_job(how, when, rc, messages) -> None:
    job = _job(how, when)
    _check(job, rc, *messages)
    assert job.lines(0) == [] if when == "first" else job.lines(0)[0] == "first call [0, 0, 0]"
    if how == "raise":  # the program's traceback, without the instance runner's frames
        err = "\n".join(job.lines(1, "stderr"))
        assert "ending.py" in err and "mpi4py/run.py" not in err and "runpy" not in err


@pytest.mark.parametrize(
    ("spec", "rc", "message"),
    [
        # status 0 before MPI started: Open MPI lets it go; the start-up guard does not
        (
            "os._exit:start",
            137,
            "PopDist: instance 0 waited {} s in MPI start-up for the other instances, but "
            "instance 1 ended before starting MPI, with exit status 0",
        ),
        ("os._exit:mpi", None, None),
        ("kill:mpi", 137, "process rank 1"),
    ],
    ids=["os._exit-before-MPI", "os._exit-in-MPI-start-up", "SIGKILL-in-MPI-start-up"],
)
def test_an_instance_that_ends_before_or_in_mpi_start_up_ends_the_job(spec, rc, message) -> None:
    job = _job("return", "never", startup=spec)
    text = job.stdout + job.stderr
    assert job.rc != 0 and (rc is None or job.rc == rc), text[-3000:]
    if message is not None:
        head, _, tail = message.partition("{}")
        assert head in text and tail in text, text[-3000:]
    assert "first call" not in job.stdout
    assert job.seconds < PROMPT, job.seconds


def test_an_instance_stuck_before_mpi_start_up_is_ended_by_the_collective_time_out() -> None:
    job = _job("return", "never", startup="sleep:start", collective_timeout=3)
    assert job.rc != 0
    assert "they did not all start MPI within the collective time-out (3 s)" in job.stderr
    assert job.seconds < PROMPT  # instance 1 sleeps 60 s


def test_a_finished_instance_waits_for_the_others_at_most_the_collective_time_out() -> None:
    # instance 0 sleeps a minute after instance 1 has finished (by sys.argv[2] "busy"): the
    # finished instance waits for it in its exit, up to the time-out, then ends the job
    job = _job("return", "busy", collective_timeout=3)
    assert job.rc == 1
    assert (
        "PopDist: instance 1 finished the program and waited 3 s for the other instances to "
        "finish theirs; they did not"
    ) in job.stderr
    assert job.seconds < PROMPT
