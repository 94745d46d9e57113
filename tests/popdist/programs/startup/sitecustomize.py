"""Loaded by Python's start-up in every process of a test job (this folder is put on
``PYTHONPATH``): instance 1 ends as ``TREMULA_TEST_END`` says, before or during MPI's
start-up, which no program line can reach (the instance runner starts MPI first).

``TREMULA_TEST_END`` is ``how:when``: ``how`` ``os._exit`` (status 0), ``kill`` (SIGKILL) or
``sleep`` (stuck for a minute); ``when`` ``start`` (at Python's start, before MPI) or
``mpi`` (10 ms into the import of ``mpi4py.MPI``, which starts MPI).
"""

import os
import signal
import sys
import threading
import time

_SPEC = os.environ.get("TREMULA_TEST_END", "")


def _end(how: str) -> None:
    if how == "os._exit":
        os._exit(0)
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "sleep":
        time.sleep(60)


class _AtMPI:
    """An import hook that ends this process shortly after MPI's start-up begins."""

    def __init__(self, how: str) -> None:
        self.how = how

    def find_spec(self, name, path=None, target=None):
        if name == "mpi4py.MPI":

            def later() -> None:
                time.sleep(0.01)
                _end(self.how)

            threading.Thread(target=later, daemon=True).start()
        return None


if _SPEC and os.environ.get("OMPI_COMM_WORLD_RANK") == "1":
    _how, _when = _SPEC.split(":")
    if _when == "start":
        _end(_how)
    else:
        sys.meta_path.insert(0, _AtMPI(_how))
