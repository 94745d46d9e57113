"""PopXL's distributed example: a replica-grouped variable across instances.

Run: ``tremula poprun --num-replicas 2 --num-instances 2 python distributed_simple_example.py``

Every replica is its own group (``group_size=1``), so the variable's host data has one row
per replica, ``(2, 4)``; each instance uploads the row of its replica (instance 0 row 0,
instance 1 row 1). After ``v += 1`` every instance prints the full updated tensor:
``[[1 2 3 4] [5 6 7 8]]``.

Mended from the documentation: ``popxl.variable`` takes ``replica_grouping=`` (the page
passes ``grouping=``).
"""

import numpy as np

import popxl

ir = popxl.Ir(replication="popdist")
with ir.main_graph:
    grouping = ir.replica_grouping(group_size=1)  # one group per replica
    v_data = np.arange(8, dtype=np.int32).reshape(2, 4)  # (num_groups, *shape)
    v = popxl.variable(v_data, name="v", replica_grouping=grouping)
    assert v.shape == (4,)  # the shape on one replica
    v += 1

with popxl.Session(ir, "ipu_hw") as session:
    session.run()
print(session.get_tensor_data(v))
