"""PopXL's distributed example: a replica-sharded (RTS) variable across instances.

Run: ``tremula poprun --num-replicas 2 --num-instances 2 python distributed_rts_simple_example.py``

The variable ``[1, 1]`` is sharded over both replicas (one per instance): each holds
``[1]``. The replicas all-gather it, use it in a dummy matmul, reduce-scatter a gradient of
ones (``add`` over 2 replicas: each shard of the gradient is ``[2]``) and add it to their
shard. Every instance prints the full variable, ``[3 3]``.

Mended from the documentation: ``ops.matmul`` (the page calls ``ops.matmul_``, which PopXL
never had); and the page's comment says ``[2, 2]``, but the program it shows sums two
ones into each shard, so it prints ``[3, 3]``.
"""

import numpy as np

import popxl
from popxl import ops

ir = popxl.Ir(replication="popdist")
with ir.main_graph:
    v_data = np.full((2,), 1, dtype=np.float32)
    v, v_shard = popxl.replica_sharded_variable(v_data, popxl.float32, "v")
    assert v_shard.shape == (1,)
    w = popxl.variable(np.full((2, 2), 2, dtype=np.float32), name="w")  # an on-chip weight

    v_gathered = ops.collectives.replicated_all_gather(v_shard)  # the full [1, 1]
    y = ops.matmul(v_gathered.reshape((1, 2)), w)  # a dummy use of the gathered variable
    grad = ops.collectives.replicated_reduce_scatter(
        popxl.constant(np.ones((2,), np.float32)) + 0 * y.reshape((2,)),
        configure_output_for_replicated_tensor_sharding=True,
    )
    v_shard += grad

with popxl.Session(ir, "ipu_hw") as session:
    session.run()
print(session.get_tensor_data(v))
