"""Instance 1 ends (by ``sys.argv[1]``, at ``sys.argv[2]``) while instance 0 waits for it in
a collective PopDist call (``popdist.broadcast``, as ``Session.run`` is).

how: ``return`` (the program ends normally), ``exit3`` (``sys.exit(3)``), ``raise`` (an
uncaught exception), ``kill`` (SIGKILL), ``os._exit`` (status 0, no clean-up);
when: ``first`` (before its first PopDist call), ``after`` (after a call both made);
``busy``: no instance ends early, but instance 0 works on for a minute after both calls.
"""

import os
import signal
import sys
import time

import numpy as np

import popdist


def end(how: str) -> None:
    if how == "exit3":
        sys.exit(3)
    if how == "raise":
        raise RuntimeError("instance 1 failed on purpose")
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "os._exit":
        os._exit(0)


how, when = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "first"
one = popdist.getInstanceIndex() == 1
if one and when == "first":
    if how == "return":
        sys.exit(0)
    end(how)
(got,) = popdist.broadcast([np.full(3, popdist.getInstanceIndex(), np.int32)], root=0)
print("first call", got.tolist(), flush=True)
if one and when == "after":
    time.sleep(0.5)  # instance 0 waits in its second call by now
    if how == "return":
        sys.exit(0)
    end(how)
popdist.broadcast([np.zeros(3, np.int32)], root=0)
print("second call", flush=True)
if when == "busy" and not one:
    time.sleep(60)
