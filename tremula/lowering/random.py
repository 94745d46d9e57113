"""Lowering of ``popxl/ops/random.py`` onto poprand (Philox, counter-based): every op reads
its seed tensor at run time and draws with the seed modifier recorded in its attributes.
Replicas given the same seed draw the same numbers (``per_replica=False``): PopXL programs
feed each replica its own seed when they want different numbers."""

from __future__ import annotations

from tremula import poplar
from tremula.libs import popops, poprand
from tremula.libs.popops import expr as pe
from tremula.lowering.driver import Env, Lowerer, rule
from tremula.popxl.ops.base import OpNode


@rule("RandomUniform", "RandomNormal")
def random(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    out, a = op.outputs[0], op.attrs
    reference = lw.new_tensor(out, name=f"{out.id}/reference")
    seed, modifier = env[op.inputs[0]], a["seed_modifier"]
    dtype = out.dtype.as_poplar()
    if op.type == "RandomUniform":
        r = poprand.uniform(
            lw.graph, seed, modifier, reference, dtype, a["low"], a["high"], prog,
            name=out.id, per_replica=False,
        )  # fmt: skip
    else:
        r = poprand.normal(
            lw.graph, seed, modifier, reference, dtype, a["mean"], a["std"], prog,
            name=out.id, per_replica=False,
        )  # fmt: skip
    env[out] = r


@rule("Dropout")
def dropout(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    t, seed = env[op.inputs[0]], env[op.inputs[1]]
    keep = 1.0 - op.attrs["p"]
    env[op.outputs[0]] = poprand.dropout(
        lw.graph, seed, op.attrs["seed_modifier"], t, None, keep, 1.0 / keep, prog,
        name=op.outputs[0].id, per_replica=False,
    )  # fmt: skip


@rule("ShapedDropout")
def shaped_dropout(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    t, seed = env[op.inputs[0]], env[op.inputs[1]]
    keep, name = 1.0 - op.attrs["ratio"], op.outputs[0].id
    reference = lw.new_tensor(None, t.dtype, op.attrs["shape"], f"{name}/mask")
    mask = poprand.bernoulli(
        lw.graph, seed, op.attrs["seed_modifier"], reference, t.dtype, keep, prog,
        name=f"{name}/mask", per_replica=False,
    )  # fmt: skip
    env[op.outputs[0]] = popops.map(
        lw.graph, pe._1 * pe._2 * (1.0 / keep), [t, mask], prog, name=name
    )


@rule("SplitRandomSeed")
def split_random_seed(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    n, name = op.attrs["n"], op.outputs[0].id
    reference = lw.new_tensor(None, poplar.INT, (n, 2), f"{name}/words")
    words = poprand.uniform(
        lw.graph, env[op.inputs[0]], op.attrs["seed_modifier"], reference, poplar.INT,
        -(2**31), 2**31 - 1, prog, name=name, per_replica=False,
    )  # fmt: skip
    seeds = popops.cast(lw.graph, words, poplar.UNSIGNED_INT, prog, name=f"{name}/cast")
    for i, out in enumerate(op.outputs):
        env[out] = seeds[i]
