"""Data-parallel training of the README's MLP (``tremula train``) over the instances of a
PopRun job.

Run: ``tremula poprun --num-instances 2 --num-replicas 4 python
examples/distributed/data_parallel.py [--steps N]``

Each of the 4 replicas trains on its own rows of every global batch; the gradients are
averaged over all replicas (an all-reduce across the instances) before the SGD update, so
every replica keeps the same weights. Each instance reads only its shard of the data: the
rows of its replicas, found from its instance index. At the end every instance trains the
same model with the 4 replicas in one process and checks that the weights are equal, bit
for bit. Without poprun, only the one-process run is made.
"""

from __future__ import annotations

import argparse

import numpy as np

import popdist
import popxl
import popxl.ops as ops
from tremula.digits import MLP, SIZES, init_params, load_digits

REPLICAS = 4


def build(replication: int | str, batch: int, lr: float, device: str):
    """An SGD step per ``session.run`` whose gradients are averaged over all replicas.
    Returns ``(session, x stream, label stream, variables)``."""
    ir = popxl.Ir(replication=replication)
    with ir.main_graph:
        x_stream = popxl.h2d_stream((batch, SIZES[0]), popxl.float32, name="x")
        y_stream = popxl.h2d_stream((batch,), popxl.int32, name="labels")
        variables = [popxl.variable(p, name=f"p{i}") for i, p in enumerate(init_params())]
        mlp = MLP()
        fwd = ir.create_graph(mlp, x_stream.spec)
        bwd = popxl.transforms.autodiff(fwd, grads_required=mlp.params)
        x, labels = ops.host_load(x_stream, "x"), ops.host_load(y_stream, "labels")
        info = ops.call_with_info(fwd, x, inputs_dict=dict(zip(mlp.params, variables)))
        _, dlogits = ops.nll_loss_with_softmax_grad(
            ops.softmax(info.parent_output(0), axis=-1), labels
        )
        grads = ops.call(bwd.graph, dlogits, inputs_dict=bwd.inputs_dict(info))
        for var, grad in zip(variables, grads):
            ops.scaled_add_(var, ops.collectives.replicated_all_reduce(grad, op="mean"), b=-lr)
    return popxl.Session(ir, device), x_stream, y_stream, variables


def shard(data: np.ndarray, step: int, batch: int, first: int, count: int) -> np.ndarray:
    """Rows of step ``step`` for replicas ``[first, first + count)``: ``(count, batch, ...)``
    (``(batch, ...)`` for one replica, as PopXL's streams take it)."""
    start = step * REPLICAS * batch + first * batch
    rows = data[start : start + count * batch]
    return rows.reshape(count, batch, *data.shape[1:]) if count > 1 else rows


def train(replication: int | str, steps: int, batch: int, lr: float, device: str):
    """Train for ``steps`` global batches; returns the weights."""
    x_train, y_train, _, _ = load_digits()
    session, xs, ys, variables = build(replication, batch, lr, device)
    first, count = session.ir._replica_offset, session.ir.instance_replication_factor
    with session:
        for step in range(steps):
            session.run(
                {
                    xs: shard(x_train, step, batch, first, count),
                    ys: shard(y_train, step, batch, first, count),
                }
            )
    return [session.get_tensor_data(v) for v in variables]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch", type=int, default=8, help="rows per replica and step")
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()
    if args.steps * REPLICAS * args.batch > len(load_digits()[0]):
        parser.error("--steps x 4 replicas x --batch exceeds the 1437 training rows")
    reference = train(REPLICAS, args.steps, args.batch, args.lr, "ipu_model")
    if not popdist.isPopdistEnvSet():
        print(
            f"trained {args.steps} steps with {REPLICAS} replicas in one process (run under "
            f"`tremula poprun --num-instances 2 --num-replicas 4` to distribute)"
        )
        return
    weights = train("popdist", args.steps, args.batch, args.lr, "ipu_model")
    same = all(np.array_equal(w, r) for w, r in zip(weights, reference))
    first = popdist.getReplicaIndexOffset()
    last = first + popdist.getNumLocalReplicas() - 1
    print(
        f"instance {popdist.getInstanceIndex()} of {popdist.getNumInstances()}: trained "
        f"replicas {first}..{last} of {popdist.getNumTotalReplicas()} for {args.steps} "
        f"steps; weights "
        f"{'equal' if same else 'DIFFER FROM'} the {REPLICAS}-replica single-process run",
        flush=True,
    )
    assert same, "distributed weights differ from the single-process run"


if __name__ == "__main__":
    main()
