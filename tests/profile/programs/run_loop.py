"""A PopXL program that runs its session in an endless loop with autoReport on (the
``POPLAR_ENGINE_OPTIONS`` the test sets), until a signal ends it.

``sys.argv[1]``: ``default`` (the program leaves every signal alone), ``own`` (it installs
its own SIGTERM handler first, which prints and exits with status 7) or ``exit`` (no loop:
it runs twice, as the loop does before it says so, and exits normally: the reference).
"""

import signal
import sys

import numpy as np

import popxl
from popxl import ops

if sys.argv[1] == "own":

    def handler(sig, frame):
        print(f"own handler: signal {sig}", flush=True)
        sys.exit(7)

    signal.signal(signal.SIGTERM, handler)

ir = popxl.Ir()
with ir.main_graph:
    x = popxl.variable(np.zeros(4, np.float32), name="x")
    ops.var_updates.accumulate_(x, popxl.constant(np.ones(4, np.float32)))
session = popxl.Session(ir, "ipu_model")
with session:
    # autoReport.executionProfileProgramRunCount (2) runs: later runs add nothing
    session.run()
    session.run()
    if sys.argv[1] == "exit":
        sys.exit(0)
    print("looping", flush=True)
    while True:
        session.run()
