"""PopXL's distributed example: replica-sharded variables of replica groups spanning
instances.

Run: ``tremula poprun --num-replicas 16 --num-instances 8 python
distributed_rts_complex_example.py``

16 replicas in 4 groups of 4, 4 apart (``{0,4,8,12}, {1,5,9,13}, ...``): the variable has
one value per group (host data ``(4, 32)``), and each value is sharded over 2 members of
its group (members 0 and 2 hold shard 0, members 1 and 3 shard 1: replicas 0 and 8 hold
the first half of row 0, replicas 4 and 12 its second half). Pairs of replicas 4 apart
(``{0,4}, {1,5}, ...``, each pair on two instances) gather their shards to the full row,
add 1, slice their shard back and write it to the variable. Every instance prints the full
variable: ``arange(1, 129).reshape(4, 32)``.

Mended from the documentation: ``replicated_all_gather(t, group=...)`` (the page passes the
grouping as the second positional argument, which is ``axis``); and ``popxl.in_sequence()``:
``v_gathered += 1`` writes in place what the slice then reads (``+=`` gives back the same
tensor), which only their order relates, so PopART refuses the program without it
("Inplacing ambiguity detected.").
"""

import numpy as np

import popxl
from popxl import ops

ir = popxl.Ir(replication="popdist")
num_groups = 4
with ir.main_graph, popxl.in_sequence():
    var_grouping = ir.replica_grouping(stride=4, group_size=4)
    assert var_grouping.num_groups == num_groups
    v_h = np.arange(128, dtype=np.float32).reshape(num_groups, 32)
    v, v_shard = popxl.replica_sharded_variable(
        v_h, popxl.float32, "v", replica_grouping=var_grouping, shard_over=num_groups // 2
    )
    assert v_shard.shape == (16,)

    # the only grouping that gathers a sharded tensor: the variable's, with group_size //
    # shard_over members (same stride)
    gather_grouping = ir.replica_grouping(stride=4, group_size=2)
    v_gathered = ops.collectives.replicated_all_gather(v_shard, group=gather_grouping)
    v_gathered += 1
    v_sliced = ops.collectives.replica_sharded_slice(v_gathered, group=gather_grouping)
    ops.var_updates.copy_var_update_(v_shard, v_sliced)

with popxl.Session(ir, "ipu_hw") as session:
    session.run()
print(session.get_tensor_data(v))
