"""A tiny LLaMA written as Graphcore's PopXL inference models are (``llama_popxl.py``,
``llama_popxl_inference.py``: popxl-addons modules, the rotary custom op, SwiGLU, KV caches
updated in place per step, greedy decoding, tensor parallel over 2 replicas, float16, int4
weights, remote layers, an on-device decoding loop, checkpoints) runs unmodified on Tremula
and gives the logits and greedy tokens of LLaMA's forward pass written in NumPy from its
formulas (``llama_reference.py``; checked once against Hugging Face's
``LlamaForCausalLM`` of transformers 4.31, Meta's q / k weights permuted to its
rotate-half layout: logits within 1e-6).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import popxl

# the model's modules import each other as a model folder's do (Graphcore's tests put the
# model folder on the path); their names (llama_*) are this folder's own
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

import llama_popxl
import llama_popxl_inference as llama
import llama_reference as ref

PROMPT_LEN = 6
STEPS = 5


@pytest.fixture(scope="module")
def model() -> tuple[dict[str, np.ndarray], np.ndarray]:
    cfg = llama_popxl.LlamaConfig()
    rng = np.random.default_rng(0)
    weights = ref.random_weights(
        rng, cfg.vocab_size, cfg.hidden_size, cfg.layers, cfg.intermediate_size
    )
    prompt = rng.integers(0, cfg.vocab_size, PROMPT_LEN)
    return weights, prompt


def test_reference_is_causal_and_rotary_relative() -> None:
    """The reference itself: a later token does not change earlier logits, and the
    attention scores depend on relative positions only (rotating q and k by the same
    extra angle changes nothing)."""
    cfg = llama_popxl.LlamaConfig()
    rng = np.random.default_rng(1)
    w = ref.random_weights(rng, cfg.vocab_size, cfg.hidden_size, 1, cfg.intermediate_size)
    tokens = rng.integers(0, cfg.vocab_size, 5)
    full = ref.forward(tokens, w, cfg.heads)
    np.testing.assert_allclose(
        ref.forward(tokens[:3], w, cfg.heads), full[:3], rtol=1e-12, atol=1e-12
    )
    x = rng.standard_normal((6, 2, 8))
    q, k = ref.rotary(x, 10000.0), ref.rotary(x[::-1].copy(), 10000.0)
    # position m rotates by m * theta: <R(m) a, R(n) b> depends on m - n only
    s1 = np.einsum("hd,hd->h", q[3], k[1])
    q2, k2 = (
        ref.rotary(np.concatenate([x[:1], x]), 10000.0),
        ref.rotary(np.concatenate([x[:1], x[::-1]]), 10000.0),
    )
    np.testing.assert_allclose(np.einsum("hd,hd->h", q2[4], k2[2]), s1, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "tp, dtype, remote",
    [(1, "float32", False), (2, "float32", False), (2, "float16", False), (2, "float32", True)],
)
def test_prompt_logits_and_greedy_decode(
    model: tuple[dict[str, np.ndarray], np.ndarray], tp: int, dtype: str, remote: bool
) -> None:
    """One session: the prompt fed a token per step fills the KV caches (logits of every
    position as the whole-sequence reference), then greedy decoding feeds back each
    ``ops.argmax`` token: the reference's greedy tokens. In float16 (half partials, the
    RMS norms in float32) the logits are within float16's rounding of ~20 matmul levels.
    ``remote``: the layers' weights and caches in remote buffers, loaded, run and stored
    back by an ``ops.repeat`` over the layers (GPT-J's inference)."""
    weights, prompt = model
    cfg = llama_popxl.LlamaConfig(
        tensor_parallel=tp, dtype=popxl.dtypes.dtype.as_dtype(dtype), remote_layers=remote
    )
    tol = 1e-4 if dtype == "float32" else 2e-2
    expected_logits = ref.forward(prompt, weights, cfg.heads)
    expected_tokens = ref.greedy(prompt, weights, cfg.heads, STEPS)
    gen = llama.LlamaGenerator(cfg, weights)
    with gen.session:
        logits = []
        for position, token in enumerate(prompt):
            step_logits, next_token = gen.step(np.array([token]), position)
            logits.append(step_logits[0])
        np.testing.assert_allclose(np.array(logits), expected_logits, rtol=tol, atol=tol)
        assert next_token == int(np.argmax(expected_logits[-1]))
        tokens = [next_token]
        for position in range(PROMPT_LEN, PROMPT_LEN + STEPS - 1):
            _, next_token = gen.step(np.array([tokens[-1]]), position)
            tokens.append(next_token)
    assert tokens == expected_tokens


@pytest.mark.parametrize("tp, chunks", [(1, 1), (2, 1), (1, 2), (2, 3)])
def test_prompt_at_once(
    model: tuple[dict[str, np.ndarray], np.ndarray], tp: int, chunks: int
) -> None:
    """The whole prompt in one step (``sequence_length`` 6 at position 0): its logits, and
    the greedy next token of its last position; with the attention serialised as GPT-J's
    (``chunks`` blocks of queries, each with its rows of the causal mask, concatenated)."""
    weights, prompt = model
    cfg = llama_popxl.LlamaConfig(
        tensor_parallel=tp, sequence_length=PROMPT_LEN, attention_serialisation=chunks
    )
    expected = ref.forward(prompt, weights, cfg.heads)
    gen = llama.LlamaGenerator(cfg, weights)
    with gen.session:
        logits, next_token = gen.step(prompt, 0)
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4)
    assert next_token == int(np.argmax(expected[-1]))


@pytest.mark.parametrize("tp", [1, 2])
def test_padded_sequence_greedy(model: tuple[dict[str, np.ndarray], np.ndarray], tp: int) -> None:
    """Decoding as the examples' padded inference does: the whole sequence, padded to
    ``sequence_length``, re-run at each step, the next token taken at
    ``last_token_indices``; the causal mask keeps the padding out of the valid logits."""
    weights, prompt = model
    seq = PROMPT_LEN + STEPS - 1
    cfg = llama_popxl.LlamaConfig(tensor_parallel=tp, sequence_length=seq)
    expected_tokens = ref.greedy(prompt, weights, cfg.heads, STEPS)
    gen = llama.LlamaGenerator(cfg, weights)
    tokens = list(prompt)
    with gen.session:
        for _ in range(STEPS):
            words = np.zeros(seq, np.int64)
            words[: len(tokens)] = tokens
            logits, next_token = gen.step(words, 0, last=len(tokens) - 1)
            expected = ref.forward(np.array(tokens), weights, cfg.heads)
            np.testing.assert_allclose(logits[: len(tokens)], expected, rtol=1e-4, atol=1e-4)
            tokens.append(next_token)
    assert tokens[PROMPT_LEN:] == expected_tokens


@pytest.mark.parametrize("remote", [False, True])
def test_kv_cache_state(model: tuple[dict[str, np.ndarray], np.ndarray], remote: bool) -> None:
    """After the prompt, the first layer's value cache read back from the session holds each
    replica's heads of ``rms_norm(x) @ wv.T`` at positions 0..5 and its initial zeros
    beyond (on chip, or in the remote buffer's entry)."""
    weights, prompt = model
    cfg = llama_popxl.LlamaConfig(tensor_parallel=2, remote_layers=remote)
    gen = llama.LlamaGenerator(cfg, weights)
    with gen.session:
        for position, token in enumerate(prompt):
            gen.step(np.array([token]), position)
        data = gen.session.get_named_tensors_data()
    cache = data.fwd.decoder[0].attention.heads.v_cache
    hs, n = cfg.head_size, PROMPT_LEN
    assert cache.shape == (2, 1, cfg.heads // 2, cfg.max_positions, hs)
    h = weights["tok_embeddings.weight"][prompt].astype(np.float64)
    x = ref.rms_norm(h, weights["layers.0.attention_norm.weight"], cfg.eps)
    values = (x @ weights["layers.0.attention.wv.weight"].T).reshape(n, cfg.heads, hs)
    got = cache[:, 0, :, :n].reshape(cfg.heads, n, hs)
    np.testing.assert_allclose(got, values.transpose(1, 0, 2), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(cache[:, :, :, n:], 0)


@pytest.mark.parametrize("tp", [1, 2])
def test_micro_batch_of_two(model: tuple[dict[str, np.ndarray], np.ndarray], tp: int) -> None:
    """Two sequences side by side (KV caches ``[2, heads, positions, head_size]``, the rotary
    tables broadcast over the batch): prompts of 4 tokens at once, then 3 greedy steps of
    one token each, every sequence as the reference decodes it alone."""
    weights, _ = model
    prompts = np.random.default_rng(3).integers(0, 100, (2, 4))
    expected = [ref.greedy(p, weights, 4, 3) for p in prompts]
    cfg = llama_popxl.LlamaConfig(tensor_parallel=tp, micro_batch_size=2, sequence_length=4)
    gen = llama.LlamaGenerator(cfg, weights)
    with gen.session:
        logits, tokens = gen.step_batch(prompts, 0, np.array([3, 3]))
        for b in range(2):
            np.testing.assert_allclose(
                logits[b], ref.forward(prompts[b], weights, 4), rtol=1e-4, atol=1e-4
            )
    assert tokens.tolist() == [e[0] for e in expected]
    cfg1 = llama_popxl.LlamaConfig(tensor_parallel=tp, micro_batch_size=2)
    gen1 = llama.LlamaGenerator(cfg1, weights)
    with gen1.session:
        for position in range(4):  # fill this session's caches with the prompts
            _, tokens = gen1.step_batch(prompts[:, position : position + 1], position, np.zeros(2))
        generated = [tokens]
        for position in range(4, 6):
            _, tokens = gen1.step_batch(tokens[:, None], position, np.zeros(2))
            generated.append(tokens)
    assert np.stack(generated, 1).tolist() == expected


@pytest.mark.parametrize("tp", [1, 2])
def test_int4_group_quantised_weights(
    model: tuple[dict[str, np.ndarray], np.ndarray], tp: int
) -> None:
    """float16 with every linear weight int4 group-quantised (``LinearGQ``, groups of 16;
    the LM head grouped along its input): the logits and greedy tokens of the reference
    run with the weights the codes stand for."""
    from popxl_addons.ops.group_quantize_decompress import group_quantize_compress_numpy

    weights, prompt = model
    cfg = llama_popxl.LlamaConfig(
        tensor_parallel=tp,
        dtype=popxl.float16,
        intermediate_size=160,
        group_quantise_weights=16,
    )
    rng = np.random.default_rng(4)
    weights = ref.random_weights(rng, cfg.vocab_size, cfg.hidden_size, cfg.layers, 160)
    dequantised = dict(weights)
    for name, w in weights.items():
        if ".attention.w" in name or ".feed_forward.w" in name:
            dim = -1
        elif name == "output.weight":
            dim = 0
        else:
            continue
        packed = group_quantize_compress_numpy(w.T.astype(np.float16), 16, dim)
        dequantised[name] = ref.dequantize_int4(*packed, dim).T
    expected_logits = ref.forward(prompt, dequantised, cfg.heads)
    expected_tokens = ref.greedy(prompt, dequantised, cfg.heads, STEPS)
    gen = llama.LlamaGenerator(cfg, weights)
    with gen.session:
        logits = []
        for position, token in enumerate(prompt):
            step_logits, next_token = gen.step(np.array([token]), position)
            logits.append(step_logits[0])
        tokens = [next_token]
        for position in range(PROMPT_LEN, PROMPT_LEN + STEPS - 1):
            _, next_token = gen.step(np.array([tokens[-1]]), position)
            tokens.append(next_token)
    # (quantising moves the logits by ~0.45; float16 keeps them within ~5e-3 of these)
    np.testing.assert_allclose(np.array(logits), expected_logits, rtol=1e-2, atol=1e-2)
    assert tokens == expected_tokens


@pytest.mark.parametrize("tp, mb", [(1, 1), (2, 1), (2, 2)])
def test_greedy_loop_on_device(
    model: tuple[dict[str, np.ndarray], np.ndarray], tp: int, mb: int
) -> None:
    """Prompt and decoding in one ``session.run``: the prompt's logits, then an
    ``ops.repeat`` whose body (the whole model, its layers an outlined block called per
    layer, KV caches by reference through the loop) feeds each ``ops.argmax`` back."""
    weights, prompt = model
    prompts = np.stack([prompt, prompt[::-1]])[:mb]
    cfg = llama_popxl.LlamaConfig(tensor_parallel=tp, micro_batch_size=mb, sequence_length=6)
    logits, tokens = llama.greedy_on_device(cfg, weights, prompts, STEPS)
    for b in range(mb):
        expected = ref.forward(prompts[b], weights, cfg.heads)
        np.testing.assert_allclose(logits[b], expected, rtol=1e-4, atol=1e-4)
        assert tokens[b].tolist() == ref.greedy(prompts[b], weights, cfg.heads, STEPS)


# popxl-addons' TaskSession reads session_info.json with an open() it never closes
@pytest.mark.filterwarnings("ignore:Exception ignored in.*session_info.json")
@pytest.mark.parametrize("remote", [False, True])
def test_decoding_resumes_from_a_checkpoint(
    model: tuple[dict[str, np.ndarray], np.ndarray],
    remote: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """popxl-addons' ``TaskSession`` checkpoint taken after the prompt (weights and KV
    caches, on chip or remote) restores a new session of zeroed weights, which decodes on
    as the first would have."""
    weights, prompt = model
    monkeypatch.chdir(tmp_path)
    cfg = llama_popxl.LlamaConfig(tensor_parallel=2, remote_layers=remote)
    gen = llama.LlamaGenerator(cfg, weights)
    with gen.session:
        for position, token in enumerate(prompt):
            _, next_token = gen.step(np.array([token]), position)
        gen.session.save_checkpoint("checkpoint")
    fresh = llama.LlamaGenerator(cfg, {k: np.zeros_like(v) for k, v in weights.items()})
    tokens = [next_token]
    with fresh.session:
        fresh.session.load_checkpoint("checkpoint")
        for position in range(PROMPT_LEN, PROMPT_LEN + STEPS - 1):
            tokens.append(fresh.step(np.array([tokens[-1]]), position)[1])
    assert tokens == ref.greedy(prompt, weights, cfg.heads, STEPS)
