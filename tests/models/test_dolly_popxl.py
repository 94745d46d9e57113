"""Dolly 2.0 (GPT-NeoX) written as Graphcore's PopXL LLMs are (``dolly_layers.py``,
``dolly_popxl.py``, ``dolly_inference.py``) against Hugging Face Transformers'
``GPTNeoXForCausalLM`` (4.25; 4.57 from Python 3.12 on) of a tiny random config (Dolly's
rotary_pct 0.25, parallel residual, exact GELU, untied ``embed_out``; vocabulary 120, padded
to the embedding's shards): a decoder layer's output and the gradients of its input and of
every weight (torch autograd, mapped through the same ``hf_mapping``); each layer's output
and the logits of the whole model; the inference program's greedy next tokens; the LM head's
loss and gradients. Float32, on one replica and tensor parallel over two, on ``ipu_model``
(and ``cpu``). torch and transformers missing skip this module, except under CI
(``CI=true``), where they must be installed."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import pytest
from reference_packages import reference, with_gradients

import popxl

torch = reference("torch")
transformers = reference("transformers")

import dolly_inference  # noqa: E402  (beside this file: tests/models/conftest.py puts it on the path)
import dolly_layers  # noqa: E402
import dolly_popxl  # noqa: E402
import dolly_training  # noqa: E402
import popxl_addons as addons  # noqa: E402
import t5_training  # noqa: E402
from popxl_addons.patterns import apply_pre_alias_patterns  # noqa: E402

BATCH = 2
TOL = {"rtol": 1e-5, "atol": 1e-5}


def config(tp: int, **kwargs) -> dolly_layers.DollyConfig:
    return dolly_layers.DollyConfig(tensor_parallel=tp, micro_batch_size=BATCH, **kwargs)


@pytest.fixture(scope="module")
def hf_model() -> transformers.GPTNeoXForCausalLM:
    return random_hf_model()


def random_hf_model() -> transformers.GPTNeoXForCausalLM:
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


@dataclass
class LMProgram:
    """A main graph calling ``DollyLMHeadModelTP`` on streamed ids, storing its logits."""

    ir: popxl.Ir
    words: popxl.HostToDeviceStream
    input_ids: popxl.Tensor
    variables: addons.NamedTensors
    logits: popxl.DeviceToHostStream


def lm_program(cfg: dolly_layers.DollyConfig) -> LMProgram:
    ir = popxl.Ir(replication=cfg.tensor_parallel * cfg.data_parallel)
    with ir.main_graph:
        h2d = popxl.h2d_stream((BATCH * cfg.sequence_length,), popxl.int32, name="words")
        input_ids = popxl.ops.host_load(h2d)
        facts, graph = dolly_popxl.DollyLMHeadModelTP(cfg).create_graph(input_ids)
        variables = facts.init()
        (logits,) = graph.bind(variables).call(input_ids)
        return LMProgram(ir, h2d, input_ids, variables, addons.host_store(logits))


def test_rotary_permutation_pairs_rotate_half_dimensions() -> None:
    """``(i, i + r/2)`` of the rotary part land side by side, the rest stays in place."""
    perm = dolly_layers.rotate_half_to_interleaved(16, 8)
    assert perm.tolist() == [0, 4, 1, 5, 2, 6, 3, 7, *range(8, 16)]


def layer_rotary(hf_model, x_t) -> dict:
    """The rotary cos / sin a ``GPTNeoXLayer`` called alone takes, for positions 0, 1, ...:
    the model computes them once for all its layers (``gpt_neox.rotary_emb``) in the
    Transformers that Python 3.12 and later install (4.57); 4.25's layers compute their own."""
    rotary = getattr(hf_model.gpt_neox, "rotary_emb", None)
    if rotary is None:
        return {}
    positions = torch.arange(x_t.shape[1]).unsqueeze(0)
    return {"position_embeddings": rotary(x_t, positions)}


@pytest.mark.parametrize("tp, chunks", [(1, 1), (2, 1), (2, 4)])
def test_decoder_block_and_gradients(hf_model, tp: int, chunks: int) -> None:
    """One ``GPTNeoXLayer``: output, input gradient and every weight's gradient; with the
    attention serialised in ``chunks`` blocks of queries as GPT-J's."""
    cfg = config(tp, attention_serialisation=chunks)
    layer = hf_model.gpt_neox.layers[0]
    torch.manual_seed(1)
    x_t = torch.randn((BATCH, cfg.sequence_length, cfg.hidden_size), requires_grad=True)
    layer.zero_grad()
    (out_t,) = layer(x_t, **layer_rotary(hf_model, x_t))[:1]
    grad_wrt = torch.randn(out_t.shape)
    out_t.backward(gradient=grad_wrt)
    grad_layer = with_gradients(layer)

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


def hf_layer_outputs(hf_model, input_ids: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """Each ``GPTNeoXLayer``'s output ``[batch * seq, hidden]`` and the logits."""
    outputs: list[np.ndarray] = []
    hooks = [
        layer.register_forward_hook(lambda _m, _i, out: outputs.append(out[0].detach().numpy()))
        for layer in hf_model.gpt_neox.layers
    ]
    try:
        with torch.no_grad():
            logits = hf_model(input_ids=torch.tensor(input_ids, dtype=torch.long)).logits.numpy()
    finally:
        for hook in hooks:
            hook.remove()
    hidden = hf_model.config.hidden_size
    return [o.reshape(-1, hidden) for o in outputs], logits.reshape(-1, logits.shape[-1])


@pytest.mark.parametrize(
    "tp, device, dtype",
    [
        (1, "ipu_model", "float32"),
        (2, "ipu_model", "float32"),
        (1, "cpu", "float32"),
        (2, "ipu_model", "float16"),
    ],
)
def test_layer_outputs_and_logits(hf_model, tp: int, device: str, dtype: str) -> None:
    """``DollyLMHeadModelTP``'s logits (its shards concatenated), and in the same program
    the embedding and the decoder layer graphs bound to the model's own variables, each
    layer's output streamed out. In float16 (weights and activations; Hugging Face's in
    float32) within float16's rounding of a few matmul levels."""
    cfg = config(tp, dtype=popxl.dtypes.dtype.as_dtype(dtype))
    tol = TOL if dtype == "float32" else {"rtol": 1e-2, "atol": 1e-2}
    ids = words(5, cfg.vocab_size)
    offset = dolly_popxl.DollyEmbeddingsTP.offset_inputs(cfg, ids.reshape(-1))

    program = lm_program(cfg)
    ir, variables, logits_d2h = program.ir, program.variables, program.logits
    with ir.main_graph:
        transformer = variables.transformer
        _, embeddings = dolly_popxl.DollyEmbeddingsTP(cfg).create_graph(program.input_ids)
        (x,) = embeddings.bind(transformer.embeddings).call(program.input_ids)
        _, block = dolly_layers.DollyDecoderBlockTP(cfg).create_graph(x)
        layer_d2h = []
        for n in range(cfg.layers):
            (x,) = block.bind(transformer.decoder[n]).call(x)
            layer_d2h.append(addons.host_store(x))
    apply_pre_alias_patterns(ir, level="default")

    weights = dolly_popxl.DollyLMHeadModelTP.hf_mapping(cfg, variables, hf_model)
    with popxl.Session(ir, device) as session:
        session.write_variables_data(weights)
        outputs = session.run({program.words: offset})

    expected_layers, expected_logits = hf_layer_outputs(hf_model, ids)
    for n, d2h in enumerate(layer_d2h):
        for got in replicas(outputs[d2h], tp):
            np.testing.assert_allclose(got, expected_layers[n], err_msg=f"layer {n}", **tol)
    got_logits = np.concatenate(replicas(outputs[logits_d2h], tp), axis=-1)
    np.testing.assert_allclose(got_logits, expected_logits, **tol)


@pytest.mark.parametrize("tp", [1, 2])
def test_inference_next_tokens(hf_model, tp: int) -> None:
    """The inference program (weights in remote buffers written from the Hugging Face
    model, layers by ``ops.repeat``): the logits at each sequence's last valid token (the
    second sequence padded after 10 tokens) and their argmax, two batches in two runs."""
    cfg = config(tp)
    session = dolly_inference.inference(cfg)
    last = np.array([cfg.sequence_length - 1, 9], dtype=np.int32)
    with session:
        session.write_variables_data(
            dolly_popxl.DollyLMHeadModelTP.hf_mapping(cfg, session.state.fwd, hf_model)
        )
        for seed in (6, 7):
            ids = words(seed, cfg.vocab_size)
            ids[1, 10:] = 0  # padding after the last valid token: never attended to
            outputs = session.run(
                {
                    session.inputs.words: dolly_popxl.DollyEmbeddingsTP.offset_inputs(
                        cfg, ids.reshape(-1)
                    ),
                    session.inputs.last_token_indices: per_replica(last, tp),
                }
            )
            _, logits = hf_layer_outputs(hf_model, ids)
            expected = logits.reshape(BATCH, cfg.sequence_length, -1)[np.arange(BATCH), last]
            got_logits = replicas(outputs[session.outputs.logits], tp)
            got_tokens = replicas(outputs[session.outputs.next_token], tp)
            for logits_r, tokens_r in zip(got_logits, got_tokens):
                np.testing.assert_allclose(logits_r, expected, **TOL)
                assert tokens_r.tolist() == expected.argmax(-1).tolist()


@pytest.mark.parametrize("tp", [1, 2])
def test_lm_head_loss_and_gradients(hf_model, tp: int) -> None:
    """GPT-J's training head: the mean cross entropy of ``embed_out(final_layer_norm(x))``
    (the logits sharded over the vocabulary, ``cross_entropy_sharded_loss``), the gradient
    of ``x`` and the accumulated gradients of the head's weights, against torch autograd."""
    cfg = config(tp)
    rng = np.random.default_rng(8)
    rows = BATCH * cfg.sequence_length
    x_data = rng.standard_normal((rows, cfg.hidden_size)).astype(np.float32)
    labels = rng.integers(0, cfg.vocab_size, rows).astype(np.int32)

    hf_model.zero_grad()
    x_t = torch.tensor(x_data, requires_grad=True)
    logits_t = hf_model.embed_out(hf_model.gpt_neox.final_layer_norm(x_t))
    loss_t = torch.nn.functional.cross_entropy(logits_t, torch.tensor(labels, dtype=torch.long))
    loss_t.backward()
    grad_model = with_gradients(hf_model)

    ir = popxl.Ir(replication=tp)
    with ir.main_graph:
        x_h2d = popxl.h2d_stream(x_data.shape, popxl.float32, name="x")
        labels_h2d = popxl.h2d_stream(labels.shape, popxl.int32, name="labels")
        x = popxl.ops.host_load(x_h2d)
        labels_t = popxl.ops.host_load(labels_h2d)
        facts, graph = dolly_popxl.DollyLMHeadLossAndGradTP(cfg).create_graph(x, labels_t)
        variables = facts.init()
        loss, dx = graph.bind(variables).call(x, labels_t)
        loss_d2h, dx_d2h = addons.host_store(loss), addons.host_store(dx)
    apply_pre_alias_patterns(ir, level="default")

    shard_size = cfg.vocab_size // tp
    offset_labels = labels if tp == 1 else np.stack([labels - i * shard_size for i in range(tp)])
    with popxl.Session(ir, "ipu_model") as session:
        session.write_variables_data(
            dolly_popxl.DollyLMHeadTP.hf_mapping(cfg, variables.fwd, hf_model)
        )
        outputs = session.run({x_h2d: per_replica(x_data, tp), labels_h2d: offset_labels})
        accum = variables.bwd.accum
        got_grads = session.get_tensors_data(list(accum.tensors))

    for got_loss, got_dx in zip(replicas(outputs[loss_d2h], tp), replicas(outputs[dx_d2h], tp)):
        np.testing.assert_allclose(got_loss, loss_t.item(), **TOL)
        np.testing.assert_allclose(got_dx, x_t.grad.numpy(), **TOL)
    expected = dolly_popxl.DollyLMHeadTP.hf_mapping(cfg, accum, grad_model)
    for t in accum.tensors:
        np.testing.assert_allclose(got_grads[t], expected[t], err_msg=t.name, **TOL)


@pytest.mark.parametrize("tp", [1, 2])
def test_model_gradients(hf_model, tp: int) -> None:
    """``addons.autodiff`` of the whole ``DollyLMHeadModelTP`` given a random gradient of
    the logits (sharded as they are): every weight's gradient, the vocabulary-sharded
    embedding's (its padding rows zero) included, against torch autograd."""
    cfg = config(tp)
    ids = words(9, cfg.vocab_size)
    hf_model.zero_grad()
    logits_t = hf_model(input_ids=torch.tensor(ids, dtype=torch.long)).logits
    grad_wrt = torch.randn(logits_t.shape, generator=torch.Generator().manual_seed(2))
    logits_t.backward(gradient=grad_wrt)
    grad_model = with_gradients(hf_model)
    grad_data = grad_wrt.numpy().reshape(-1, cfg.vocab_size)
    grad_shards = grad_data if tp == 1 else np.stack(np.split(grad_data, tp, axis=-1))

    ir = popxl.Ir(replication=tp)
    with ir.main_graph:
        ids_h2d = popxl.h2d_stream((ids.size,), popxl.int32, name="words")
        grad_h2d = popxl.h2d_stream(grad_shards.shape[-2:], popxl.float32, name="grad")
        input_ids = popxl.ops.host_load(ids_h2d)
        facts, graph = dolly_popxl.DollyLMHeadModelTP(cfg).create_graph(input_ids)
        variables = facts.init()
        fwd_info = graph.bind(variables).call_with_info(input_ids)
        grad_graph = addons.autodiff(graph, grads_required=graph.args.tensors)
        grad_info = grad_graph.call_with_info(
            popxl.ops.host_load(grad_h2d), args=grad_graph.grad_graph_info.inputs_dict(fwd_info)
        )
        grads = grad_graph.grad_graph_info.fwd_graph_ins_to_grad_parent_outs(grad_info)
        d2h = {t: addons.host_store(grads[t]) for t in graph.args.tensors}
    apply_pre_alias_patterns(ir, level="default")

    offset = dolly_popxl.DollyEmbeddingsTP.offset_inputs(cfg, ids.reshape(-1))
    with popxl.Session(ir, "ipu_model") as session:
        session.write_variables_data(
            dolly_popxl.DollyLMHeadModelTP.hf_mapping(cfg, variables, hf_model)
        )
        outputs = session.run({ids_h2d: offset, grad_h2d: grad_shards})

    expected = dolly_popxl.DollyLMHeadModelTP.hf_mapping(cfg, graph.args, grad_model)
    for t, stream in d2h.items():
        want = expected[t]
        if tp > 1 and want.ndim == outputs[stream].ndim - 1:  # an identical weight's
            want = per_replica(want, tp)
        np.testing.assert_allclose(outputs[stream], want, rtol=1e-4, atol=1e-4, err_msg=t.name)


@pytest.mark.parametrize("tp", [1, 2])
def test_lm_to_hf(hf_model, tp: int) -> None:
    """GPT-J's ``test_lm_to_hf``: the model's own (random) weights read back from a
    ``TaskSession`` and loaded into a fresh ``GPTNeoXForCausalLM`` give its logits; and
    ``to_hf`` of ``hf_mapping``'s data is the Hugging Face state dict, key for key."""
    cfg = config(tp)
    ids = words(10, cfg.vocab_size)
    program = lm_program(cfg)
    variables, logits_d2h, h2d = program.variables, program.logits, program.words
    apply_pre_alias_patterns(program.ir, level="default")

    mapped = dolly_popxl.DollyLMHeadModelTP.hf_mapping(cfg, variables, hf_model)
    round_trip = dolly_popxl.DollyLMHeadModelTP.to_hf(cfg, variables.map(mapped.__getitem__))
    parameters = dict(hf_model.named_parameters())  # the state dict less its buffers
    assert sorted(round_trip) == sorted(parameters)
    for key, value in parameters.items():
        np.testing.assert_array_equal(round_trip[key].numpy(), value.detach().numpy(), key)

    offset = dolly_popxl.DollyEmbeddingsTP.offset_inputs(cfg, ids.reshape(-1))
    session = addons.TaskSession(
        [h2d],
        [logits_d2h],
        addons.NamedTensors(fwd=variables),
        ir=program.ir,
        device_desc="ipu_model",
    )
    with session:
        outputs = session.run({h2d: offset})
        hf = random_hf_model()
        dolly_popxl.load_lm_to_hf(cfg, session, hf)
    _, expected = hf_layer_outputs(hf, ids)
    got = np.concatenate(replicas(outputs[logits_d2h], tp), axis=-1)
    np.testing.assert_allclose(got, expected, **TOL)


def test_greedy_generation_matches_hugging_face(hf_model) -> None:
    """GPT-J's host generation loop (``utils/inference.py``) over the inference program:
    prompts of 5 and 8 tokens padded to the sequence, each step's next tokens written after
    each prompt's last token; Hugging Face's greedy ``generate`` of each prompt alone."""
    cfg = config(2)
    prompts = [words(12, cfg.vocab_size)[0, :5], words(13, cfg.vocab_size)[0, :8]]
    steps = 4
    batch = np.zeros((BATCH, cfg.sequence_length), dtype=np.int32)
    lens = np.array([len(p) for p in prompts], dtype=np.int32)
    for i, prompt in enumerate(prompts):
        batch[i, : len(prompt)] = prompt
    session = dolly_inference.inference(cfg)
    with session:
        session.write_variables_data(
            dolly_popxl.DollyLMHeadModelTP.hf_mapping(cfg, session.state.fwd, hf_model)
        )
        for _ in range(steps):
            outputs = session.run(
                {
                    session.inputs.words: dolly_popxl.DollyEmbeddingsTP.offset_inputs(
                        cfg, batch.reshape(-1)
                    ),
                    session.inputs.last_token_indices: per_replica(lens - 1, 2),
                }
            )
            next_tokens = outputs[session.outputs.next_token][0]
            batch[np.arange(BATCH), lens] = next_tokens
            lens += 1
    for i, prompt in enumerate(prompts):
        expected = hf_model.generate(
            torch.tensor(prompt[np.newaxis], dtype=torch.long),
            max_new_tokens=steps,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=cfg.vocab_size,  # none: every step generates
        )
        assert batch[i, : lens[i]].tolist() == expected[0].tolist()


def test_data_and_tensor_parallel_logits(hf_model) -> None:
    """Two data-parallel copies of the model, each tensor parallel over two replicas (four
    replicas; the shards' variables shared by the copies): each copy's logits are those of
    its own sequences."""
    tp, dp = 2, 2
    cfg = config(tp, data_parallel=dp)
    batches = [words(seed, cfg.vocab_size) for seed in (14, 15)]
    program = lm_program(cfg)
    apply_pre_alias_patterns(program.ir, level="default")

    # replica d * tp + t: copy d's ids offset to shard t
    offset = np.concatenate(
        [dolly_popxl.DollyEmbeddingsTP.offset_inputs(cfg, ids.reshape(-1)) for ids in batches]
    )
    with popxl.Session(program.ir, "ipu_model") as session:
        session.write_variables_data(
            dolly_popxl.DollyLMHeadModelTP.hf_mapping(cfg, program.variables, hf_model)
        )
        outputs = session.run({program.words: offset})
    got = outputs[program.logits].reshape(dp, tp, *outputs[program.logits].shape[1:])
    for d, ids in enumerate(batches):
        _, expected = hf_layer_outputs(hf_model, ids)
        np.testing.assert_allclose(np.concatenate(list(got[d]), axis=-1), expected, **TOL)


@pytest.mark.parametrize("tp", [1, 2])
def test_adam_steps_match_torch_adamw(hf_model, tp: int) -> None:
    """``dolly_training``'s step twice (Adam state carried over): each step's loss and
    gradient norm, and every weight after the second, against torch's ``clip_grad_norm_``
    and ``AdamW`` (no decay on biases and layer norms) on the Hugging Face model."""
    cfg = config(tp)
    adam = t5_training.Adam(eps=1e-4, max_norm=0.5)
    lr = 1e-2
    model = copy.deepcopy(hf_model).train()
    decay = [p for n, p in model.named_parameters() if n.endswith("weight") and "norm" not in n]
    no_decay = [p for n, p in model.named_parameters() if not any(p is q for q in decay)]
    groups = [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}]
    torch_adam = adam.torch_reference(groups, lr)
    step = dolly_training.training_step(cfg, adam)
    shard_size = cfg.vocab_size // tp
    with popxl.Session(step.ir, "ipu_model") as session:
        session.write_variables_data(
            dolly_popxl.DollyLMHeadModelTP.hf_mapping(cfg, step.variables, hf_model)
        )
        for seed in (16, 17):
            ids = words(seed, cfg.vocab_size)
            labels = words(seed + 10, cfg.vocab_size).reshape(-1)
            torch_adam.zero_grad()
            logits = model(input_ids=torch.tensor(ids, dtype=torch.long)).logits
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, cfg.vocab_size), torch.tensor(labels, dtype=torch.long)
            )
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), adam.max_norm)
            assert norm.item() > adam.max_norm  # the clipping matters
            torch_adam.step()

            offset_labels = np.stack([labels - t * shard_size for t in range(tp)])
            outputs = session.run(
                {
                    step.inputs["words"]: dolly_popxl.DollyEmbeddingsTP.offset_inputs(
                        cfg, ids.reshape(-1)
                    ),
                    step.inputs["labels"]: offset_labels if tp > 1 else labels,
                    step.inputs["lr"]: per_replica(np.float32(lr), tp),
                }
            )
            for name, want in (("loss", loss.item()), ("grad_norm", norm.item())):
                for got in replicas(outputs[step.outputs[name]], tp):
                    np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=name)
        weights = session.get_tensors_data(list(step.variables.tensors))
    expected = dolly_popxl.DollyLMHeadModelTP.hf_mapping(cfg, step.variables, model)
    for t, want in expected.items():
        np.testing.assert_allclose(weights[t], want, rtol=1e-4, atol=1e-5, err_msg=t.name)
