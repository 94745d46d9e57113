"""The tiny LLaMA run as Graphcore's inference scripts run under ``poprun``
(``llama_popdist.py``): ``Ir(replication="popdist")``, tensor parallel over 2 replicas,
each instance feeding its own replicas and reading back its own. Every instance's logits
and greedy tokens are those of LLaMA's NumPy forward pass (``llama_reference.py``), for
the prompt of its data-parallel copy; ``get_tensor_data`` of a KV cache gives every
instance every replica's cache, also those of replicas other instances run.

Launched through the real mpirun (``tests/popdist/launch.py``): one job per layout.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest

if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

import llama_popdist as job_program
import llama_reference as ref
import popxl_addons
from llama_popxl import LlamaConfig

HERE = Path(__file__).parent
_LAUNCH = "tremula_tests_popdist_launch"
if _LAUNCH not in sys.modules:  # tests/popdist/conftest.py loads it when that folder runs
    _spec = importlib.util.spec_from_file_location(_LAUNCH, HERE.parent / "popdist" / "launch.py")
    assert _spec is not None and _spec.loader is not None
    sys.modules[_LAUNCH] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules[_LAUNCH])
launch = sys.modules[_LAUNCH]

TP = 2


def _run(tmp_path: Path, instances: int, replicas: int) -> list[dict[str, np.ndarray]]:
    # the instances import popxl-addons as this process does
    addons = str(Path(popxl_addons.__file__).parents[1])
    path = os.pathsep.join(filter(None, [addons, os.environ.get("PYTHONPATH")]))
    job = launch.poprun(
        "--num-instances",
        str(instances),
        "--num-replicas",
        str(replicas),
        "python",
        str(HERE / "llama_popdist.py"),
        str(tmp_path),
        str(TP),
        env={"PYTHONPATH": path},
    )
    assert job.rc == 0, job.stderr[-4000:]
    # poprun tells the job its IPU-Link domain, which popxl-addons' RTS groups read
    assert "Could not read IPU link domain size" not in job.stderr
    return [dict(np.load(tmp_path / f"instance{i}.npz")) for i in range(instances)]


def _value_cache(weights: dict[str, np.ndarray], tokens: list[int], cfg: LlamaConfig, r: int):
    """Replica ``r``'s first-layer value cache holding ``tokens`` at positions 0.., as the
    session keeps it: ``[batch, heads / tp, max_positions, head_size]`` (its shard's heads)."""
    h = weights["tok_embeddings.weight"][tokens].astype(np.float64)
    x = ref.rms_norm(h, weights["layers.0.attention_norm.weight"], cfg.eps)
    values = (x @ weights["layers.0.attention.wv.weight"].T).reshape(-1, cfg.heads, cfg.head_size)
    cache = np.zeros((cfg.heads, cfg.max_positions, cfg.head_size))
    cache[:, : len(tokens)] = values.transpose(1, 0, 2)
    per_shard = cfg.heads // TP
    return cache[None, (r % TP) * per_shard : (r % TP + 1) * per_shard]


@pytest.mark.parametrize("instances, replicas", [(2, 2), (2, 4)], ids=["2x1-tp2", "2x2-tp2-dp2"])
def test_every_instance_decodes_as_the_reference(
    tmp_path: Path, instances: int, replicas: int
) -> None:
    """2 instances of 1 replica (one model over both), or of 2 (tensor parallel inside an
    instance, a data-parallel copy per instance, each with its own prompt): the prompt a
    token per run then greedy decoding with the KV caches on the device, and the prompt
    at once (its attention serialised in chunks as GPT-J's) with the decoding loop on the
    device, and remote layers resumed from a checkpoint, on every instance."""
    results = _run(tmp_path, instances, replicas)
    copies = replicas // TP
    cfg = LlamaConfig(tensor_parallel=TP, data_parallel=copies)
    weights = job_program.weights(cfg)
    prompts = job_program.prompts(copies, cfg.vocab_size)
    assert len({tuple(p) for p in prompts}) == copies
    logits = [ref.forward(p, weights, cfg.heads) for p in prompts]
    tokens = [ref.greedy(p, weights, cfg.heads, job_program.STEPS) for p in prompts]
    local = replicas // instances
    runs = ("steps", "loop", "resumed")
    for i, got in enumerate(results):
        mine = range(i * local, (i + 1) * local)
        names = {f"{run}_tokens_{r}" for run in runs for r in mine}
        names |= {f"{run}_logits_{r}" for run in runs[:2] for r in mine}
        assert set(got) == names | {"v_cache"}, f"instance {i}"
        for r in mine:
            for run in runs:
                where = f"instance {i}, replica {r}, {run}"
                assert got[f"{run}_tokens_{r}"].tolist() == tokens[r // TP], where
                if run != "resumed":
                    np.testing.assert_allclose(
                        got[f"{run}_logits_{r}"],
                        logits[r // TP],
                        rtol=1e-4,
                        atol=1e-4,
                        err_msg=where,
                    )
        # every replica's cache, on every instance (a group per replica)
        assert got["v_cache"].shape == (replicas, 1, cfg.heads // TP, cfg.max_positions, 16)
        for r in range(replicas):
            fed = [*prompts[r // TP], *tokens[r // TP][:-1]]
            np.testing.assert_allclose(
                got["v_cache"][r], _value_cache(weights, fed, cfg, r), rtol=1e-5, atol=1e-5
            )
