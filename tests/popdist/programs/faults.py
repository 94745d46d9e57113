"""Collective device calls made on only some instances (by ``sys.argv[1]``):

* ``finish``: instance 1 finishes the program while instance 0 calls ``Session.run``;
* ``other``: instance 1 calls ``weights_to_host`` while instance 0 calls ``Session.run``;
* ``stuck``: instance 1 sleeps while instance 0 waits in ``Session.run`` (the collective
  time-out ends the job).
"""

import sys
import time

import numpy as np

import popdist
import popxl
from popxl import ops

how = sys.argv[1]
ir = popxl.Ir(replication="popdist")
with ir.main_graph:
    v = popxl.variable(np.zeros(3, np.float32), name="v")
    ops.var_updates.accumulate_(v, ops.collectives.replicated_all_reduce(v + 1.0))
session = popxl.Session(ir, "cpu")
with session:
    if popdist.getInstanceIndex() == 0:
        session.run()
    elif how == "other":
        session.weights_to_host()
    elif how == "stuck":
        time.sleep(120)
    if how != "finish":
        print("not reached", flush=True)
        sys.exit(0)
    sys.exit(0)  # instance 1 leaves (the session context is not exited)
