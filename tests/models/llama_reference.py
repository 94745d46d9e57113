"""LLaMA's forward pass in NumPy (float64), written from its published formulas (Touvron
et al. 2023, "LLaMA: Open and Efficient Foundation Language Models", and Meta's reference
``model.py``): pre-normalisation with RMSNorm, ``x * w / sqrt(mean(x^2) + eps)``; rotary
position embeddings on queries and keys, the head's features taken as complex numbers
``x[2i] + j x[2i+1]`` rotated by ``m * base^(-2i / head_size)`` at position ``m``; causal
multi-head attention scaled by ``1 / sqrt(head_size)``; the SwiGLU feed-forward
``w2(silu(w1 x) * w3 x)``; a final RMSNorm and the output projection. Weights are Meta's
state dict (torch ``Linear`` layout ``[out, in]``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["dequantize_int4", "forward", "greedy", "random_weights"]


def random_weights(
    rng: np.random.Generator, vocab: int, hidden: int, layers: int, intermediate: int
) -> dict[str, np.ndarray]:
    """A random Meta-layout state dict (float32), scaled so activations stay O(1)."""

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        return (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    weights = {
        "tok_embeddings.weight": rng.standard_normal((vocab, hidden)).astype(np.float32),
        "norm.weight": norm(hidden),
        "output.weight": w(vocab, hidden),
    }
    for n in range(layers):
        p = f"layers.{n}"
        for name in ("wq", "wk", "wv", "wo"):
            weights[f"{p}.attention.{name}.weight"] = w(hidden, hidden)
        weights[f"{p}.feed_forward.w1.weight"] = w(intermediate, hidden)
        weights[f"{p}.feed_forward.w2.weight"] = w(hidden, intermediate)
        weights[f"{p}.feed_forward.w3.weight"] = w(intermediate, hidden)
        weights[f"{p}.attention_norm.weight"] = norm(hidden)
        weights[f"{p}.ffn_norm.weight"] = norm(hidden)
    return weights


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rotary(x: np.ndarray, base: float) -> np.ndarray:
    """``x`` ``[seq, heads, head_size]`` at positions ``0..seq-1``, rotated."""
    seq, _, hs = x.shape
    theta = base ** (-np.arange(0, hs, 2, dtype=np.float64) / hs)
    angle = np.outer(np.arange(seq, dtype=np.float64), theta)  # [seq, hs/2]
    z = x[..., 0::2] + 1j * x[..., 1::2]
    z = z * np.exp(1j * angle)[:, None, :]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = z.real, z.imag
    return out


def attention(
    x: np.ndarray, weights: Mapping[str, np.ndarray], p: str, heads: int, base: float
) -> np.ndarray:
    seq, hidden = x.shape
    hs = hidden // heads

    def proj(name: str) -> np.ndarray:
        return (x @ weights[f"{p}.{name}.weight"].T).reshape(seq, heads, hs)

    q, k, v = rotary(proj("wq"), base), rotary(proj("wk"), base), proj("wv")
    scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hs)
    scores = np.where(np.tril(np.ones((seq, seq), bool)), scores, -np.inf)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    probs = scores / scores.sum(-1, keepdims=True)
    out = np.einsum("hqk,khd->qhd", probs, v).reshape(seq, hidden)
    return out @ weights[f"{p}.wo.weight"].T


def feed_forward(x: np.ndarray, weights: Mapping[str, np.ndarray], p: str) -> np.ndarray:
    gate = x @ weights[f"{p}.w1.weight"].T
    up = x @ weights[f"{p}.w3.weight"].T
    silu = gate / (1 + np.exp(-gate))
    return (silu * up) @ weights[f"{p}.w2.weight"].T


def forward(
    tokens: np.ndarray,
    weights: Mapping[str, np.ndarray],
    heads: int,
    eps: float = 1e-6,
    base: float = 10000.0,
) -> np.ndarray:
    """The logits ``[seq, vocab]`` of ``tokens`` (positions ``0..seq-1``)."""
    w = {k: np.asarray(v, np.float64) for k, v in weights.items()}
    h = w["tok_embeddings.weight"][np.asarray(tokens)]
    n = 0
    while f"layers.{n}.attention_norm.weight" in w:
        p = f"layers.{n}"
        h = h + attention(
            rms_norm(h, w[f"{p}.attention_norm.weight"], eps), w, f"{p}.attention", heads, base
        )
        h = h + feed_forward(rms_norm(h, w[f"{p}.ffn_norm.weight"], eps), w, f"{p}.feed_forward")
        n += 1
    return rms_norm(h, w["norm.weight"], eps) @ w["output.weight"].T


def greedy(
    prompt: np.ndarray, weights: Mapping[str, np.ndarray], heads: int, steps: int, **kw: float
) -> list[int]:
    """``steps`` tokens chosen greedily after ``prompt`` (the whole sequence re-run each step)."""
    tokens = list(np.asarray(prompt).tolist())
    for _ in range(steps):
        tokens.append(int(np.argmax(forward(np.array(tokens), weights, heads, **kw)[-1])))
    return tokens[len(prompt) :]


def dequantize_int4(
    packed: np.ndarray, scale: np.ndarray, bias: np.ndarray, dim: int
) -> np.ndarray:
    """4-bit group-quantised weights back to numbers (float64): ``packed`` ``[..., groups,
    group_size / 4]`` holds four 4-bit codes per uint16, the first in the top bits; each
    code ``q`` of a group stands for ``q * scale + bias``; the groups run along the last
    axis, which goes back to ``dim`` (FlexGen's scheme, as popxl-addons packs it)."""
    shifts = np.array([12, 8, 4, 0], np.uint16)
    codes = (packed[..., None] >> shifts) & 0xF  # [..., groups, group_size / 4, 4]
    codes = codes.reshape(*packed.shape[:-1], -1).astype(np.float64)
    values = codes * scale.astype(np.float64) + bias.astype(np.float64)
    values = values.reshape(*packed.shape[:-2], -1)
    return np.moveaxis(values, -1, dim) if dim != -1 else values
