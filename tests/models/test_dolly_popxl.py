"""Dolly 2.0 (GPT-NeoX) written as Graphcore's PopXL LLMs are (``dolly_layers.py``,
``dolly_popxl.py``, ``dolly_inference.py``) against Hugging Face Transformers'
``GPTNeoXForCausalLM`` (4.25) of a tiny random config (Dolly's rotary_pct 0.25, parallel
residual, exact GELU, untied ``embed_out``; vocabulary 120, padded to the embedding's
shards): a decoder layer's output and the gradients of its input and of every weight
(torch autograd, mapped through the same ``hf_mapping``); each layer's output and the
logits of the whole model; the inference program's greedy next tokens; the LM head's
loss and gradients. Float32, on one replica and tensor parallel over two, on ``ipu_model``
(and ``cpu``). torch and transformers missing skip this module, except under CI
(``CI=true``), where they must be installed."""

from __future__ import annotations

import copy
import importlib
import os
from types import ModuleType

import numpy as np
import pytest

import popxl


def _reference(name: str) -> ModuleType:
    if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
        return importlib.import_module(name)
    return pytest.importorskip(name)


torch = _reference("torch")
transformers = _reference("transformers")

import dolly_inference  # noqa: E402  (beside this file: tests/models/conftest.py puts it on the path)
import dolly_layers  # noqa: E402
import dolly_popxl  # noqa: E402
import popxl_addons as addons  # noqa: E402
from popxl_addons.patterns import apply_pre_alias_patterns  # noqa: E402

BATCH = 2
TOL = {"rtol": 1e-5, "atol": 1e-5}


def config(tp: int, **kwargs) -> dolly_layers.DollyConfig:
    return dolly_layers.DollyConfig(tensor_parallel=tp, micro_batch_size=BATCH, **kwargs)


@pytest.fixture(scope="module")
def hf_model() -> transformers.GPTNeoXForCausalLM:
    cfg = dolly_layers.DollyConfig()
    hf_config = transformers.GPTNeoXConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        intermediate_size=cfg.intermediate_size,
        hidden_act="gelu",
        rotary_pct=cfg.rotary_pct,
        rotary_emb_base=cfg.rotary_emb_base,
        max_position_embeddings=cfg.sequence_length,
        layer_norm_eps=cfg.layer_norm_eps,
        use_parallel_residual=True,
        tie_word_embeddings=False,
    )
    torch.manual_seed(11)
    model = transformers.GPTNeoXForCausalLM(hf_config).eval()
    with torch.no_grad():  # biases start at zero, norms at one: make their mapping matter
        for name, parameter in model.named_parameters():
            if name.endswith("bias") or "layernorm" in name or "layer_norm" in name:
                parameter.add_(0.1 * torch.randn(parameter.shape))
            elif parameter.dim() == 2:  # larger weights: the layers' outputs are not near zero
                parameter.mul_(5.0)
    return model


def words(seed: int, vocab: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, vocab, (BATCH, 16)).astype(np.int32)


def per_replica(data: np.ndarray, tp: int) -> np.ndarray:
    """Identical input on every replica."""
    return data if tp == 1 else np.repeat(data[np.newaxis], tp, axis=0)


def replicas(data, tp: int) -> list[np.ndarray]:
    return [data] if tp == 1 else list(data)


def test_rotary_permutation_pairs_rotate_half_dimensions() -> None:
    """``(i, i + r/2)`` of the rotary part land side by side, the rest stays in place."""
    perm = dolly_layers.rotate_half_to_interleaved(16, 8)
    assert perm.tolist() == [0, 4, 1, 5, 2, 6, 3, 7, *range(8, 16)]


@pytest.mark.parametrize("tp", [1, 2])
def test_decoder_block_and_gradients(hf_model, tp: int) -> None:
    """One ``GPTNeoXLayer``: output, input gradient and every weight's gradient."""
    cfg = config(tp)
    layer = hf_model.gpt_neox.layers[0]
    torch.manual_seed(1)
    x_t = torch.randn((BATCH, cfg.sequence_length, cfg.hidden_size), requires_grad=True)
    layer.zero_grad()
    (out_t,) = layer(x_t)[:1]
    grad_wrt = torch.randn(out_t.shape)
    out_t.backward(gradient=grad_wrt)
    grad_layer = copy.deepcopy(layer)  # the layer holding its weights' gradients
    grads = {name: p.grad.clone() for name, p in layer.named_parameters()}
    for name, parameter in grad_layer.named_parameters():
        parameter.data = grads[name]

    ir = popxl.Ir(replication=tp)
    with ir.main_graph:
        data = x_t.detach().numpy().reshape(-1, cfg.hidden_size)
        h2d = popxl.h2d_stream(data.shape, popxl.float32, name="x")
        x = popxl.ops.host_load(h2d)
        facts, graph = dolly_layers.DollyDecoderBlockTP(cfg).create_graph(x)
        variables = facts.init()
        fwd_info = graph.bind(variables).call_with_info(x)
        (out,) = fwd_info.outputs
        out_d2h = addons.host_store(out)
        grad_graph = addons.autodiff(
            graph, grads_required=[graph.graph.inputs[0], *graph.args.tensors]
        )
        gradient = popxl.constant(grad_wrt.reshape(out.shape).numpy().copy(), out.dtype, "gradient")
        dx, *dweights = grad_graph.call(
            gradient, args=grad_graph.grad_graph_info.inputs_dict(fwd_info)
        )
        dx_d2h = addons.host_store(dx)
        dweight_d2h = {t: addons.host_store(g) for t, g in zip(graph.args.tensors, dweights)}
    apply_pre_alias_patterns(ir, level="default")

    weights = dolly_layers.DollyDecoderBlockTP.hf_mapping(cfg, variables, layer)
    with popxl.Session(ir, "ipu_model") as session:
        session.write_variables_data(weights)
        outputs = session.run({h2d: per_replica(data, tp)})

    expected_grads = dolly_layers.DollyDecoderBlockTP.hf_mapping(cfg, graph.args, grad_layer)
    out_hf = out_t.detach().numpy().reshape(-1, cfg.hidden_size)
    dx_hf = x_t.grad.numpy().reshape(-1, cfg.hidden_size)
    for r in range(tp):
        np.testing.assert_allclose(replicas(outputs[out_d2h], tp)[r], out_hf, **TOL)
        np.testing.assert_allclose(replicas(outputs[dx_d2h], tp)[r], dx_hf, **TOL)
    for t, d2h in dweight_d2h.items():
        got = outputs[d2h]
        expected = expected_grads[t]
        if tp > 1 and expected.ndim == got.ndim - 1:  # an identical weight's, per replica
            expected = per_replica(expected, tp)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4, err_msg=t.name)
