"""The tiny LLaMA of ``llama_popxl_inference.py`` as one instance of a PopRun job, as
Graphcore's inference scripts run under ``poprun``: ``Ir(replication="popdist")``, each
instance feeding its own replicas (``popdist.getReplicaIndexOffset()`` onwards) and reading
back its own. Replica ``r`` is shard ``r % tp`` of data-parallel copy ``r // tp``; copy
``d`` decodes prompt ``d`` of :func:`prompts`.

``llama_popdist.py OUTDIR TP [DTYPE]`` (``TP`` the tensor-parallel size; the job's replicas
over it the data-parallel copies; ``DTYPE`` the model's, float32 by default) runs three
programs and saves instance ``i``'s results to ``OUTDIR/instance{i}.npz``, keyed by global
replica:

- ``steps_logits_{r}`` ``[PROMPT_LEN, vocab]``, ``steps_tokens_{r}`` ``[STEPS]``: the
  prompt a token per ``session.run`` (KV caches kept on the device), then greedy decoding
  a token per run, each instance feeding back its own replicas' tokens;
- ``v_cache``: the first layer's value cache after those steps, ``get_tensor_data`` of a
  variable of a group per replica (every instance gets every replica's);
- ``loop_logits_{r}`` ``[PROMPT_LEN, vocab]``, ``loop_tokens_{r}`` ``[STEPS]``: the prompt
  at once, its attention serialised in 3 chunks of queries as GPT-J's, and the decoding
  loop on the device, one ``session.run``;
- ``resumed_tokens_{r}`` ``[STEPS]``: the layers in remote buffers, each weight
  replica-sharded over its data-parallel group (GPT-J's RTS); the prompt, then a
  popxl-addons ``TaskSession`` checkpoint (written by instance 0 alone, as its
  ``save_checkpoint`` does under PopDist) restoring a session of zeroed weights on every
  instance, which decodes on.

Without poprun it runs every replica in this process (the same files, ``instance0.npz``).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

import llama_popxl_inference as llama
import llama_reference as ref
from llama_popxl import LlamaConfig, LlamaEmbeddingsTP

import popdist
import popxl

PROMPT_LEN = 6
STEPS = 4


def weights(cfg: LlamaConfig) -> dict[str, np.ndarray]:
    """The same random weights on every instance."""
    rng = np.random.default_rng(11)
    return ref.random_weights(rng, cfg.vocab_size, cfg.hidden_size, cfg.layers, 172)


def prompts(copies: int, vocab: int) -> np.ndarray:
    """A different prompt per data-parallel copy, ``[copies, PROMPT_LEN]``."""
    return np.random.default_rng(12).integers(0, vocab, (copies, PROMPT_LEN))


def local_replicas(ir) -> range:
    """The global indices of this instance's replicas."""
    offset = popdist.getReplicaIndexOffset() if popdist.isPopdistEnvSet() else 0
    return range(offset, offset + ir.instance_replication_factor)


def feed(cfg: LlamaConfig, replicas: range, words: dict[int, np.ndarray]) -> np.ndarray:
    """A host stream's data for ``replicas``: each one's ``words`` (whole-vocabulary ids of
    its copy) offset into its shard, the replica axis dropped for one replica."""
    rows = [
        LlamaEmbeddingsTP.offset_input(np.asarray(words[r], np.int32), r % cfg.tensor_parallel, cfg)
        for r in replicas
    ]
    return np.stack(rows) if len(rows) > 1 else rows[0]


def per_replica(data: np.ndarray, replicas: range) -> dict[int, np.ndarray]:
    """A host stream's output split by global replica."""
    if len(replicas) == 1:
        data = data[None]
    return {r: data[i] for i, r in enumerate(replicas)}


def step(
    session, cfg: LlamaConfig, replicas: range, words: dict[int, np.ndarray], position: int
) -> tuple[dict[int, np.ndarray], dict[int, int]]:
    """One ``session.run`` of :func:`llama.inference` (a token per replica at
    ``position``): each replica's logits ``[vocab]`` and next token."""
    results = session.run(
        {
            session.inputs.words: feed(cfg, replicas, words),
            session.inputs.position: feed_same(np.array([position], np.uint32), replicas),
            session.inputs.last_token_indices: feed_same(np.zeros(1, np.int32), replicas),
        }
    )
    logits = per_replica(results[session.outputs.logits], replicas)
    tokens = per_replica(results[session.outputs.next_token], replicas)
    return {r: logits[r][0] for r in replicas}, {r: int(tokens[r][0]) for r in replicas}


def prompt_steps(session, cfg: LlamaConfig, replicas: range, p: np.ndarray):
    """Each replica's copy's prompt a token per run: the logits ``[PROMPT_LEN, vocab]``
    and the first greedy token of each replica."""
    logits: dict[int, list[np.ndarray]] = {r: [] for r in replicas}
    for position in range(PROMPT_LEN):
        words = {r: p[r // cfg.tensor_parallel, position : position + 1] for r in replicas}
        step_logits, first = step(session, cfg, replicas, words, position)
        for r in replicas:
            logits[r].append(step_logits[r])
    return {r: np.array(logits[r]) for r in replicas}, first


def decode_steps(session, cfg: LlamaConfig, replicas: range, first: dict[int, int]):
    """Greedy decoding after the prompt, each replica fed back its own tokens:
    ``[STEPS]`` tokens per replica, ``first`` the first."""
    tokens = {r: [first[r]] for r in replicas}
    for position in range(PROMPT_LEN, PROMPT_LEN + STEPS - 1):
        words = {r: np.array(tokens[r][-1:]) for r in replicas}
        _, following = step(session, cfg, replicas, words, position)
        for r in replicas:
            tokens[r].append(following[r])
    return {r: np.array(tokens[r]) for r in replicas}


def run_steps(cfg: LlamaConfig, w: dict[str, np.ndarray], p: np.ndarray) -> dict[str, np.ndarray]:
    session, variables = llama.inference(cfg)
    replicas = local_replicas(session.ir)
    with session:
        session.write_variables_data(llama.mapping(cfg, variables, w))
        logits, first = prompt_steps(session, cfg, replicas, p)
        tokens = decode_steps(session, cfg, replicas, first)
        data = session.get_named_tensors_data()
    out = {"v_cache": data.fwd.decoder[0].attention.heads.v_cache}
    for r in replicas:
        out[f"steps_logits_{r}"] = logits[r]
        out[f"steps_tokens_{r}"] = tokens[r]
    return out


def run_resumed(
    cfg: LlamaConfig, w: dict[str, np.ndarray], p: np.ndarray, checkpoint: Path
) -> dict[str, np.ndarray]:
    """The layers in remote buffers: the prompt, a ``TaskSession`` checkpoint (instance 0
    writes it), then a session of zeroed weights restored from it decodes on."""
    cfg = replace(cfg, remote_layers=True, rts_layers=True)
    session, variables = llama.inference(cfg)
    replicas = local_replicas(session.ir)
    with session:
        session.write_variables_data(llama.mapping(cfg, variables, w))
        _, first = prompt_steps(session, cfg, replicas, p)
        session.save_checkpoint(str(checkpoint))
    if popdist.isPopdistEnvSet():
        from mpi4py import MPI

        MPI.COMM_WORLD.Barrier()  # instance 0 has written it
    fresh, variables = llama.inference(cfg)
    zeros = {k: np.zeros_like(v) for k, v in w.items()}
    with fresh:
        fresh.write_variables_data(llama.mapping(cfg, variables, zeros))
        fresh.load_checkpoint(str(checkpoint))
        tokens = decode_steps(fresh, cfg, replicas, first)
    return {f"resumed_tokens_{r}": tokens[r] for r in replicas}


def feed_same(value: np.ndarray, replicas: range) -> np.ndarray:
    return np.stack([value] * len(replicas)) if len(replicas) > 1 else value


def run_loop(cfg: LlamaConfig, w: dict[str, np.ndarray], p: np.ndarray) -> dict[str, np.ndarray]:
    cfg = replace(cfg, sequence_length=PROMPT_LEN, attention_serialisation=3)
    session, variables = llama.generate(cfg, STEPS)
    replicas = local_replicas(session.ir)
    state = llama.mapping(cfg, variables, w)
    state[variables.vocab_offset] = llama.vocab_offsets(cfg)
    with session:
        session.write_variables_data(state)
        words = {r: p[r // cfg.tensor_parallel] for r in replicas}
        results = session.run({session.inputs.words: feed(cfg, replicas, words)})
    logits = per_replica(results[session.outputs.logits], replicas)
    tokens = per_replica(results[session.outputs.tokens], replicas)
    out = {}
    for r in replicas:
        out[f"loop_logits_{r}"] = logits[r]
        out[f"loop_tokens_{r}"] = tokens[r][:, 0]
    return out


def main(outdir: Path, tp: int, dtype: str) -> None:
    replicas = popdist.getNumTotalReplicas() if popdist.isPopdistEnvSet() else 2 * tp
    cfg = LlamaConfig(
        tensor_parallel=tp,
        data_parallel=replicas // tp,
        dtype=popxl.dtypes.dtype.as_dtype(dtype),
    )
    w = weights(cfg)
    p = prompts(cfg.data_parallel, cfg.vocab_size)
    out = {**run_steps(cfg, w, p), **run_loop(cfg, w, p)}
    out.update(run_resumed(cfg, w, p, outdir / "checkpoint"))
    index = popdist.getInstanceIndex() if popdist.isPopdistEnvSet() else 0
    np.savez(outdir / f"instance{index}.npz", **out)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "float32")
