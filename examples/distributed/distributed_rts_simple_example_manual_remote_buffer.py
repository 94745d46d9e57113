"""PopXL's distributed example: a replica-sharded variable in a remote buffer made by hand.

Run: ``tremula poprun --num-replicas 2 --num-instances 2 python
distributed_rts_simple_example_manual_remote_buffer.py``

As ``distributed_rts_simple_example.py``, with the buffer made by
``replica_sharded_buffer`` (it takes the full, unsharded shape), the shard loaded from it at
the start and stored back at the end. Every instance prints ``[3 3]``.

Mended from the documentation: ``popxl.int32`` (the page uses ``popxl.dtypes.int``, which
PopXL does not have); ``remote_replica_sharded_variable(data, remote_buffer, offset)`` (the
page passes ``(data, 0, remote_buffer)``); ``ops.mul`` for the dummy on-chip use of the
gathered variable (the page calls ``ops.matmul_``, which PopXL never had); and the page's
comment says ``[2, 2]``, but two ones are summed into each shard, so it prints ``[3, 3]``;
and ``popxl.in_sequence()``: ``v_shard += grad`` writes the shard in place and the store
reads ``v_shard`` (``+=`` gives back the same tensor), which only their order relates, so
PopART refuses the program without it ("Inplacing ambiguity detected.").
"""

import numpy as np

import popxl
from popxl import ops
from popxl.tensor import replica_sharded_buffer

ir = popxl.Ir(replication="popdist")
with ir.main_graph, popxl.in_sequence():
    v_data = np.full((2,), 1, dtype=np.int32)
    buffer = replica_sharded_buffer((2,), popxl.int32)
    v = popxl.remote_replica_sharded_variable(v_data, buffer, 0)

    v_shard = ops.remote_load(buffer, 0)
    w = popxl.variable(np.full((2,), 2, dtype=np.int32), name="w")  # an on-chip weight
    v_gathered = ops.collectives.replicated_all_gather(v_shard)
    y = ops.mul(v_gathered, w)  # a dummy use of the gathered variable
    grad = ops.collectives.replicated_reduce_scatter(
        popxl.constant(np.ones((2,), np.int32)) + 0 * y,
        configure_output_for_replicated_tensor_sharding=True,
    )
    v_shard += grad
    ops.remote_store(buffer, 0, v_shard)

with popxl.Session(ir, "ipu_hw") as session:
    session.run()
print(session.get_tensor_data(v))
