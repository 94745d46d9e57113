"""The tiny LLaMA of ``llama_popxl_inference.py`` as one instance of a PopRun job, as
Graphcore's inference scripts run under ``poprun``: ``Ir(replication="popdist")``, each
instance feeding its own replicas (``popdist.getReplicaIndexOffset()`` onwards) and reading
back its own. Replica ``r`` is shard ``r % tp`` of data-parallel copy ``r // tp``; copy
``d`` decodes prompt ``d`` of :func:`prompts`.

``llama_popdist.py OUTDIR TP`` (``TP`` the tensor-parallel size; the job's replicas over it
the data-parallel copies) runs two programs and saves instance ``i``'s results to
``OUTDIR/instance{i}.npz``, keyed by global replica:

- ``steps_logits_{r}`` ``[PROMPT_LEN, vocab]``, ``steps_tokens_{r}`` ``[STEPS]``: the
  prompt a token per ``session.run`` (KV caches kept on the device), then greedy decoding
  a token per run, each instance feeding back its own replicas' tokens;
- ``v_cache``: the first layer's value cache after those steps, ``get_tensor_data`` of a
  variable of ``tp`` shards (every instance gets copy 0's, whichever replicas it runs);
- ``loop_logits_{r}`` ``[PROMPT_LEN, vocab]``, ``loop_tokens_{r}`` ``[STEPS]``: the prompt
  at once and the decoding loop on the device, one ``session.run``.

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


def run_steps(cfg: LlamaConfig, w: dict[str, np.ndarray], p: np.ndarray) -> dict[str, np.ndarray]:
    session, variables = llama.inference(cfg)
    replicas = local_replicas(session.ir)
    out: dict[str, np.ndarray] = {}
    with session:
        session.write_variables_data(llama.mapping(cfg, variables, w))
        logits: dict[int, list[np.ndarray]] = {r: [] for r in replicas}
        tokens: dict[int, list[int]] = {r: [] for r in replicas}
        for position in range(PROMPT_LEN + STEPS - 1):
            if position < PROMPT_LEN:
                words = {r: p[r // cfg.tensor_parallel, position : position + 1] for r in replicas}
            else:
                words = {r: np.array(tokens[r][-1:]) for r in replicas}
            results = session.run(
                {
                    session.inputs.words: feed(cfg, replicas, words),
                    session.inputs.position: feed_same(np.array([position], np.uint32), replicas),
                    session.inputs.last_token_indices: feed_same(np.zeros(1, np.int32), replicas),
                }
            )
            step_logits = per_replica(results[session.outputs.logits], replicas)
            step_tokens = per_replica(results[session.outputs.next_token], replicas)
            for r in replicas:
                if position < PROMPT_LEN:
                    logits[r].append(step_logits[r][0])
                if position >= PROMPT_LEN - 1:
                    tokens[r].append(int(step_tokens[r][0]))
        data = session.get_named_tensors_data()
    for r in replicas:
        out[f"steps_logits_{r}"] = np.array(logits[r])
        out[f"steps_tokens_{r}"] = np.array(tokens[r])
    out["v_cache"] = data.fwd.decoder[0].attention.heads.v_cache
    return out


def feed_same(value: np.ndarray, replicas: range) -> np.ndarray:
    return np.stack([value] * len(replicas)) if len(replicas) > 1 else value


def run_loop(cfg: LlamaConfig, w: dict[str, np.ndarray], p: np.ndarray) -> dict[str, np.ndarray]:
    cfg = replace(cfg, sequence_length=PROMPT_LEN)
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


def main(outdir: Path, tp: int) -> None:
    replicas = popdist.getNumTotalReplicas() if popdist.isPopdistEnvSet() else 2 * tp
    cfg = LlamaConfig(tensor_parallel=tp, data_parallel=replicas // tp)
    w = weights(cfg)
    p = prompts(cfg.data_parallel, cfg.vocab_size)
    out = {**run_steps(cfg, w, p), **run_loop(cfg, w, p)}
    index = popdist.getInstanceIndex() if popdist.isPopdistEnvSet() else 0
    np.savez(outdir / f"instance{index}.npz", **out)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
