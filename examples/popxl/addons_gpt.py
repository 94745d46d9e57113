"""A small GPT-style character model of tiny Shakespeare (shipped with Tremula), written as
Graphcore's PopXL tutorials write models on popxl-addons, trained with replication 2 on
the IPU Model.

The model is popxl-addons Modules: token and position embeddings, pre-norm transformer
blocks (causal multi-head attention, a GELU MLP) and a projection to the vocabulary. Each
step every replica loads its own batch, runs the forward graph, takes the cross-entropy of
the next character (``ops.nll_loss_with_softmax_grad``: the loss and its gradient), runs
the backward graph that ``addons.autodiff`` made, with recomputation
(``recompute_graph``: activations recomputed, not kept), averages the gradients across the
replicas and updates each weight with popxl-addons' Adam step (``ops.var_updates``'
moving averages and ``adam_updater``). The loss printed is the mean of the replicas'.

    PYTHONPATH=<popxl-addons checkout> python examples/popxl/addons_gpt.py [--steps N]

It checks that the loss fell from about ln(vocabulary) = 4.2: the default 300 steps end
near 2.5, in about 40 s of CPU time.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from functools import partial

import numpy as np
import popxl_addons as addons
from popxl_addons.layers import Embedding, LayerNorm, Linear
from popxl_addons.optimizers.adam import AdamOptimizerStep
from popxl_addons.transforms.recomputation import recompute_graph

import popxl
import popxl.ops as ops
from tremula import data


@dataclass
class Config:
    steps: int = 300
    vocab: int = 0  # set from the corpus
    hidden: int = 32
    heads: int = 2
    layers: int = 2
    sequence: int = 16
    batch: int = 8  # per replica
    replicas: int = 2
    lr: float = 1e-2
    seed: int = 0


class Attention(addons.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.qkv = Linear(3 * config.hidden)
        self.out = Linear(config.hidden)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        c = self.config
        B, S, hd = c.batch, c.sequence, c.hidden // c.heads

        def heads(t: popxl.Tensor) -> popxl.Tensor:  # [B * S, H] -> [B, heads, S, hd]
            return t.reshape((B, S, c.heads, hd)).transpose((0, 2, 1, 3))

        q, k, v = (heads(t) for t in ops.split(self.qkv(x), 3, axis=-1))
        scores = (q @ k.transpose((0, 1, 3, 2))) * (1 / math.sqrt(hd))
        causal = np.triu(np.full((S, S), -1e4, np.float32), k=1)
        probs = ops.softmax(scores + popxl.constant(causal, name="causal_mask"), axis=-1)
        context = (probs @ v).transpose((0, 2, 1, 3)).reshape((B * S, c.hidden))
        return self.out(context)


class Block(addons.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.ln_1, self.attention = LayerNorm(), Attention(config)
        self.ln_2, self.up = LayerNorm(), Linear(4 * config.hidden)
        self.down = Linear(config.hidden)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        x = x + self.attention(self.ln_1(x))
        return x + self.down(ops.gelu(self.up(self.ln_2(x))))


class GPT(addons.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.embedding = Embedding(popxl.float32, config.vocab, config.hidden)
        self.blocks = [Block(config) for _ in range(config.layers)]
        for i, block in enumerate(self.blocks):
            setattr(self, f"block_{i}", block)  # named block_0.*, block_1.*, ...
        self.ln_f, self.head = LayerNorm(), Linear(config.vocab)

    def build(self, ids: popxl.Tensor) -> popxl.Tensor:
        c = self.config
        positions = self.add_variable_input(
            "positions",
            partial(np.random.default_rng(c.seed).normal, 0, 0.02, (c.sequence, c.hidden)),
            popxl.float32,
        )
        x = (self.embedding(ids) + positions).reshape((c.batch * c.sequence, c.hidden))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))  # [B * S, vocabulary]


def build(
    config: Config,
) -> tuple[popxl.Ir, popxl.HostToDeviceStream, popxl.HostToDeviceStream, popxl.DeviceToHostStream]:
    c = config
    ir = popxl.Ir(replication=c.replicas)
    with ir.main_graph, popxl.in_sequence():
        ids_stream = popxl.h2d_stream((c.batch, c.sequence), popxl.int32, "ids")
        labels_stream = popxl.h2d_stream((c.batch * c.sequence,), popxl.int32, "labels")
        loss_stream = popxl.d2h_stream((), popxl.float32, "loss")
        ids, labels = ops.host_load(ids_stream), ops.host_load(labels_stream)

        facts, fwd = GPT(c).create_graph(ids)
        bwd = recompute_graph(addons.autodiff(fwd, grads_required=fwd.args.tensors))
        params = facts.init()
        call = fwd.bind(params).call_with_info(ids)
        probs = ops.softmax(call.outputs[0], axis=-1)
        loss, dlogits = ops.nll_loss_with_softmax_grad(probs, labels)
        grads = bwd.call(dlogits, args=bwd.grad_graph_info.inputs_dict(call))
        ops.host_store(loss_stream, loss)

        grad_of = dict(zip(bwd.grad_graph_info.outputs, grads))  # forward input -> gradient
        variables = params.to_dict()
        for name, arg in fwd.args.to_dict().items():
            var, grad = variables[name], grad_of[arg]
            grad = ops.collectives.replicated_all_reduce(grad, "mean")  # data parallel
            adam_facts, adam = AdamOptimizerStep().create_graph(
                var, grad, lr=c.lr, weight_decay=0.0, first_order_dtype=popxl.float32
            )
            adam.bind(adam_facts.init()).call(var, grad)
    return ir, ids_stream, labels_stream, loss_stream


def train(config: Config) -> list[float]:
    _, vocab, corpus = data.char_corpus()
    config.vocab = vocab.size
    c = config
    np.random.seed(c.seed)  # popxl-addons' layers draw initial weights from NumPy's global RNG
    ir, ids_stream, labels_stream, loss_stream = build(c)
    stream = data.batches(corpus, c.sequence + 1, c.batch * c.replicas, seed=c.seed)
    losses = []
    with popxl.Session(ir, "ipu_model") as session:
        for step in range(c.steps):
            seqs = next(stream).reshape(c.replicas, c.batch, c.sequence + 1)
            out = session.run(
                {
                    ids_stream: seqs[..., :-1],
                    labels_stream: seqs[..., 1:].reshape(c.replicas, -1),
                }
            )
            losses.append(float(out[loss_stream].mean()))
            if step % 25 == 0 or step == c.steps - 1:
                print(f"step {step}, loss = {losses[-1]:.3f}")
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=Config.steps)
    args = parser.parse_args()
    losses = train(Config(steps=args.steps))
    first, last = np.mean(losses[:3]), np.mean(losses[-3:])
    print(f"loss {first:.3f} -> {last:.3f} over {len(losses)} steps")
    assert last < first - 0.3, f"the loss did not fall ({first:.3f} -> {last:.3f})"


if __name__ == "__main__":
    main()
