"""Instance 1 fails (by ``sys.argv[1]``: raise, kill or exit) while the others wait for it in
a collective; the job must end at once."""

import os
import signal
import sys
import time

from mpi4py import MPI

how = sys.argv[1]
comm = MPI.COMM_WORLD
if comm.Get_rank() == 1:
    time.sleep(0.3)
    if how == "raise":
        raise RuntimeError("instance 1 failed on purpose")
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "exit":
        sys.exit(3)
comm.Barrier()
print("passed the barrier", flush=True)
