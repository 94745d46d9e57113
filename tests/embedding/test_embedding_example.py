"""The char-GRU example at small sizes: it trains with replication 2, and the host,
remote TOKEN and remote ENCODING embeddings give the same losses bit for bit (the same
sums in the same order)."""

from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np

EXAMPLE = Path(__file__).resolve().parents[2] / "examples/host_embedding/char_gru.py"


def test_host_and_remote_buffer_embeddings_train_the_same():
    example = runpy.run_path(str(EXAMPLE), run_name="test")
    Config, train = example["Config"], example["train"]
    small = {"steps": 3, "iterations": 2, "hidden": 8, "sequence": 12, "batch": 4}
    runs = {}
    for mode in ("host", "TOKEN", "ENCODING"):
        remote = {"remote_buffer": True, "partition_strategy": mode} if mode != "host" else {}
        losses, _, trainer = train(Config(**small, **remote), log=False)
        runs[mode] = (losses, trainer.emb.get_embedding_tensor().copy())
    losses, table = runs["host"]
    assert all(np.isfinite(losses)) and losses[0] > 5.4  # about ln(256) at the start
    for mode in ("TOKEN", "ENCODING"):
        assert runs[mode][0] == losses, mode
        np.testing.assert_array_equal(runs[mode][1], table, err_msg=mode)
