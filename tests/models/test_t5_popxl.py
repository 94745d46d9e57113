"""The T5 of ``t5_popxl.py`` (written as Graphcore's PopXL models are, on popxl-addons) against
Hugging Face Transformers' ``T5ForConditionalGeneration`` built from a tiny ``T5Config`` with
random weights: logits, loss and the gradient of every weight (torch autograd) in float32 and
float16, on one IPU and tensor parallel over two replicas, with recomputation, by phased
execution, two AdamW steps (one or two per run), greedy decoding from remote weights and a
checkpoint handed from training to inference.

The relative position buckets reach the logarithmic bins (8 buckets, distances up to 20, 12
encoder and 9 decoder positions), the encoder mask pads the second sample, and some labels are
``-100`` (ignored by the loss). torch and transformers (the ``models`` extra) missing skip this
module, except under CI (``CI=true``), where they must be installed."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from reference_packages import reference

import popxl
from popxl import ops

torch = reference("torch")
transformers = reference("transformers")

import t5_cached  # noqa: E402
import t5_inference  # noqa: E402
import t5_phased  # noqa: E402
import t5_popxl  # noqa: E402  (beside this file: tests/models/conftest.py puts it on the path)
import t5_training  # noqa: E402
from popxl_addons import NamedTensors, TaskSession  # noqa: E402

BATCH, ENCODER_LENGTH, DECODER_LENGTH = 2, 12, 9


def hf_model(tie_word_embeddings: bool) -> transformers.T5ForConditionalGeneration:
    config = transformers.T5Config(
        vocab_size=32,
        d_model=16,
        d_kv=6,  # heads * d_kv = 24, not d_model (as in T5 v1.1 small: 6 * 64 vs 512)
        d_ff=24,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=20,
        dropout_rate=0.0,
        feed_forward_proj="gated-gelu",
        tie_word_embeddings=tie_word_embeddings,
        decoder_start_token_id=0,
    )
    torch.manual_seed(7)
    model = transformers.T5ForConditionalGeneration(config).eval()
    with torch.no_grad():  # layer norms start at one: make their mapping matter
        for name, parameter in model.named_parameters():
            if name.endswith("layer_norm.weight"):
                parameter.add_(0.1 * torch.randn(parameter.shape))
    return model


def batch(model: transformers.T5ForConditionalGeneration) -> dict:
    generator = torch.Generator().manual_seed(3)
    vocab = model.config.vocab_size
    input_ids = torch.randint(1, vocab, (BATCH, ENCODER_LENGTH), generator=generator)
    attention_mask = torch.ones((BATCH, ENCODER_LENGTH))
    attention_mask[1, -4:] = 0
    input_ids[1, -4:] = model.config.pad_token_id
    labels = torch.randint(1, vocab, (BATCH, DECODER_LENGTH), generator=generator)
    labels[0, -2:] = t5_popxl.IGNORE_INDEX
    labels[1, -5:] = t5_popxl.IGNORE_INDEX
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "decoder_input_ids": model._shift_right(labels),
        "labels": labels,
    }


def assert_gradients_close(grads: dict, expected_grads: dict, tolerance: float = 1e-5) -> None:
    """Each gradient within ``tolerance`` of its largest element (float32's rounding, summed
    in another order: elements near zero from cancelling terms differ by more than a relative
    tolerance would allow)."""
    for tensor, expected in expected_grads.items():
        assert grads[tensor].shape == expected.shape, tensor.name
        atol = tolerance * float(np.abs(expected).max())
        np.testing.assert_allclose(
            grads[tensor], expected, rtol=0, atol=atol, err_msg=f"gradient {tensor.name}"
        )


def gradients_as_model(model: transformers.T5ForConditionalGeneration) -> object:
    """A copy of ``model`` whose parameters hold its gradients (for ``hf_mapping``)."""
    grads = copy.deepcopy(model)
    for parameter, original in zip(grads.parameters(), model.parameters()):
        parameter.data = original.grad.clone()
    return grads


def popxl_config(
    model: transformers.T5ForConditionalGeneration, tensor_parallel: int = 1
) -> t5_popxl.T5Config:
    return t5_popxl.T5Config.from_hf(
        model.config,
        micro_batch_size=BATCH,
        encoder_length=ENCODER_LENGTH,
        decoder_length=DECODER_LENGTH,
        tensor_parallel=tensor_parallel,
    )


def stream_inputs(config: t5_popxl.T5Config, streams: dict, data: dict) -> dict:
    """Each stream's data: with tensor parallelism, one array per replica (ids offset to each
    replica's shard of the vocabulary, the rest repeated)."""
    tp = config.tensor_parallel
    inputs = {}
    for name, stream in streams.items():
        value = np.asarray(data[name]).reshape(stream.shape)
        if name in ("input_ids", "decoder_input_ids", "labels"):
            value = t5_popxl.T5Embedding.offset_ids(config, value)
        elif tp > 1:
            value = np.repeat(value[np.newaxis], tp, axis=0)
        inputs[stream] = value.astype(stream.dtype.as_numpy())
    return inputs


@pytest.mark.parametrize(
    "tie_word_embeddings, tensor_parallel, recompute",
    [(False, 1, False), (True, 1, True), (False, 2, True), (True, 2, False)],
    ids=["untied", "tied-recompute", "untied-tp2-recompute", "tied-tp2"],
)
def test_t5_training_step_matches_hugging_face(
    tie_word_embeddings: bool, tensor_parallel: int, recompute: bool
) -> None:
    """Loss and gradients, on one IPU or with the heads, feed-forward and vocabulary sharded
    over two replicas (each replica's logits are its shard's, its gradients its shards'), the
    backward given the forward's activations or recomputing them (``recompute_graph``)."""
    model = hf_model(tie_word_embeddings)
    data = batch(model)
    out = model(**data)
    out.loss.backward()

    config = popxl_config(model, tensor_parallel)
    step = t5_training.build_training_step(config, recompute=recompute)
    weights = t5_popxl.T5ForConditionalGeneration.hf_mapping(config, step.variables, model)
    assert set(weights) == set(step.variables.tensors)
    expected_grads = t5_popxl.T5ForConditionalGeneration.hf_mapping(
        config, step.grads, gradients_as_model(model)
    )
    assert set(expected_grads) == set(step.grads.tensors)

    with popxl.Session(step.ir, "ipu_model") as session:
        session.write_variables_data(weights)
        outputs = session.run(stream_inputs(config, step.inputs, data))
        grads = session.get_tensors_data(list(expected_grads))

    logits = out.logits.detach().numpy().reshape(-1, config.vocab_size)
    loss = np.asarray(outputs[step.outputs["loss"]])
    shards = outputs[step.outputs["logits"]]
    if tensor_parallel > 1:  # one loss per replica, the same
        np.testing.assert_array_equal(loss, np.full(tensor_parallel, loss[0]))
        loss, shards = loss[0], np.concatenate(list(shards), axis=-1)
    np.testing.assert_allclose(shards, logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(loss, out.loss.item(), rtol=1e-5)
    assert_gradients_close(grads, expected_grads)


@pytest.mark.parametrize("tensor_parallel", [1, 2], ids=["tp1", "tp2"])
def test_t5_float16_training_step_matches_hugging_face(tensor_parallel: int) -> None:
    """The model in float16 (layer-norm statistics in float32) with the loss scaled by 64,
    against Hugging Face in float32: float16's precision (logits within 3e-2, each gradient
    within 2e-2 of its largest element)."""
    model = hf_model(tie_word_embeddings=False)
    data = batch(model)
    out = model(**data)
    out.loss.backward()

    config = popxl_config(model, tensor_parallel)
    config.dtype = popxl.float16
    loss_scaling = 64.0
    step = t5_training.build_training_step(config, loss_scaling=loss_scaling)
    mapping = t5_popxl.T5ForConditionalGeneration.hf_mapping
    expected_grads = mapping(config, step.grads, gradients_as_model(model))
    with popxl.Session(step.ir, "ipu_model") as session:
        session.write_variables_data(mapping(config, step.variables, model))
        outputs = session.run(stream_inputs(config, step.inputs, data))
        grads = session.get_tensors_data(list(expected_grads))

    shards = outputs[step.outputs["logits"]]
    assert shards.dtype == np.float16
    if tensor_parallel > 1:
        shards = np.concatenate(list(shards), axis=-1)
    logits = out.logits.detach().numpy().reshape(shards.shape)
    np.testing.assert_allclose(shards, logits, atol=3e-2)
    loss = np.asarray(outputs[step.outputs["loss"]], np.float32).reshape(-1)
    np.testing.assert_allclose(loss, out.loss.item(), rtol=2e-3)
    for tensor, expected in expected_grads.items():
        grad = grads[tensor].astype(np.float32) / loss_scaling
        scale = np.abs(expected.astype(np.float32)).max()
        np.testing.assert_allclose(grad, expected, atol=2e-2 * scale, err_msg=tensor.name)


@pytest.mark.parametrize("device_iterations", [1, 2], ids=["step-per-run", "two-steps-per-run"])
def test_t5_adam_steps_match_torch_adamw(device_iterations: int) -> None:
    """Two training steps with popxl-addons' Adam (gradients clipped to a global norm) against
    torch's ``clip_grad_norm_`` and ``AdamW``: losses, norms and the weights after each run;
    one run per step, or both steps in one run (the main graph looped by ``repeat_graph``)."""
    model = hf_model(tie_word_embeddings=False)
    data = batch(model)
    # eps well above the float32 noise of the tiny gradient elements (cancelling terms give
    # them errors of a few 1e-8): Adam divides each element by its own size plus eps
    adam = t5_training.Adam(eps=1e-4, max_norm=0.5)
    lrs = [1e-2, 5e-3]
    config = popxl_config(model)
    step = t5_training.build_training_step(config, adam, device_iterations=device_iterations)
    mapping = t5_popxl.T5ForConditionalGeneration.hf_mapping
    weights = mapping(config, step.variables, model)

    torch_adam = adam.torch_reference(model.parameters(), lrs[0])
    expected = []  # (loss, norm, weights) after each step
    for lr in lrs:
        torch_adam.zero_grad()
        for group in torch_adam.param_groups:
            group["lr"] = lr
        loss = model(**data).loss
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), adam.max_norm)
        assert norm.item() > adam.max_norm  # the clip is in effect
        torch_adam.step()
        trained = {t: np.array(a) for t, a in mapping(config, step.variables, model).items()}
        expected.append((loss.item(), norm.item(), trained))

    runs = [lrs] if device_iterations > 1 else [[lr] for lr in lrs]
    done = 0
    with popxl.Session(step.ir, "ipu_model") as session:
        session.write_variables_data(weights)
        for run_lrs in runs:
            feeds = [stream_inputs(config, step.inputs, {**data, "lr": lr}) for lr in run_lrs]
            inputs = {s: np.stack([f[s] for f in feeds]) for s in feeds[0]}
            if device_iterations == 1:
                inputs = {s: v[0] for s, v in inputs.items()}
            outputs = session.run(inputs)
            trained = session.get_tensors_data(step.variables.tensors)
            done += len(run_lrs)

            losses, norms, _ = zip(*expected[done - len(run_lrs) : done])
            loss_out = np.asarray(outputs[step.outputs["loss"]]).reshape(-1)
            norm_out = np.asarray(outputs[step.outputs["grad_norm"]]).reshape(-1)
            np.testing.assert_allclose(loss_out, losses, rtol=1e-5)
            np.testing.assert_allclose(norm_out, norms, rtol=1e-5)
            for tensor, value in expected[done - 1][2].items():
                np.testing.assert_allclose(
                    trained[tensor], value, rtol=1e-5, atol=1e-3 * lrs[0], err_msg=tensor.name
                )


@pytest.mark.parametrize(
    "tie_word_embeddings, tensor_parallel, io_tiles",
    [(False, 1, 32), (True, 2, 0)],
    ids=["untied-io-tiles", "tied-tp2"],
)
def test_t5_greedy_decoding_matches_hugging_face(
    tie_word_embeddings: bool, tensor_parallel: int, io_tiles: int
) -> None:
    """Weights in remote buffers, layers in ``ops.repeat``: the greedy continuation of each
    sample, one run per token, and the logits it chose from, against Hugging Face's."""
    model = hf_model(tie_word_embeddings)
    data = batch(model)
    config = popxl_config(model, tensor_parallel)
    inference = t5_inference.build_inference(config, io_tiles=io_tiles)
    weights = t5_popxl.T5ForConditionalGeneration.hf_mapping(config, inference.variables, model)
    assert set(weights) == set(inference.variables.tensors)

    def replica(out: np.ndarray) -> np.ndarray:
        """One replica's output (with tensor parallelism, after checking all are the same)."""
        if tensor_parallel == 1:
            return out
        np.testing.assert_array_equal(out, np.repeat(out[:1], tensor_parallel, axis=0))
        return out[0]

    ids = np.full((BATCH, DECODER_LENGTH), model.config.decoder_start_token_id, np.int32)
    expected = torch.from_numpy(ids.astype(np.int64))
    with popxl.Session(inference.ir, "ipu_model") as session:
        session.write_variables_data(weights)
        for t in range(DECODER_LENGTH - 1):
            feed = {
                "input_ids": data["input_ids"],
                "attention_mask": data["attention_mask"],
                "decoder_input_ids": ids,
                "last_token_index": np.full((BATCH,), t),
            }
            outputs = session.run(stream_inputs(config, inference.inputs, feed))
            ids[:, t + 1] = replica(outputs[inference.next_token])
            with torch.no_grad():
                logits = model(
                    input_ids=data["input_ids"],
                    attention_mask=data["attention_mask"],
                    decoder_input_ids=expected[:, : t + 1],
                ).logits
            expected[:, t + 1] = logits[:, t].argmax(-1)
            np.testing.assert_allclose(
                replica(outputs[inference.next_token_logits]),
                logits[:, t].numpy(),
                rtol=1e-5,
                atol=1e-5,
            )
    np.testing.assert_array_equal(ids, expected.numpy())


@pytest.mark.parametrize("bidirectional", [True, False], ids=["encoder", "decoder"])
def test_t5_relative_position_bias_matches_hugging_face(bidirectional: bool) -> None:
    """T5's default buckets (32, up to 128 positions apart) over 160 positions: the buckets
    computed in the graph, including the distances where the logarithmic bins meet exact
    integers in real arithmetic (16, 32, 64 ...), against ``T5Attention.compute_bias``."""
    from transformers.models.t5.modeling_t5 import T5Attention

    length = 160
    hf_config = transformers.T5Config(num_heads=4, d_model=16, d_kv=4, is_decoder=not bidirectional)
    torch.manual_seed(5)
    attention = T5Attention(hf_config, has_relative_attention_bias=True)
    with torch.no_grad():
        expected = attention.compute_bias(length, length).numpy()

    config = t5_popxl.T5Config(num_heads=4, relative_attention_num_buckets=32)
    config.relative_attention_max_distance = 128
    ir = popxl.Ir()
    with ir.main_graph:
        module = t5_popxl.T5RelativePositionBias(config, bidirectional)
        facts, graph = module.create_graph(length, length)
        variables = facts.init()
        (bias,) = graph.bind(variables).call()
        stream = popxl.d2h_stream(bias.shape, bias.dtype, name="bias")
        ops.host_store(stream, bias)
    weights = t5_popxl.T5RelativePositionBias.hf_mapping(config, variables, attention)
    with popxl.Session(ir, "ipu_model") as session:
        session.write_variables_data(weights)
        out = session.run()[stream]
    np.testing.assert_array_equal(out, expected)


# popxl-addons' load_checkpoint reads session_info.json through an `open` it never closes
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_t5_checkpoint_from_training_to_inference(tmp_path) -> None:
    """As Graphcore's fine-tuning hands over to inference: a ``TaskSession`` trains one Adam
    step and saves a checkpoint, the inference ``TaskSession`` (its weights in remote buffers)
    loads it, and its logits are Hugging Face's after the same torch step."""
    model = hf_model(tie_word_embeddings=False)
    data = batch(model)
    config = popxl_config(model)
    adam, lr = t5_training.Adam(eps=1e-4, max_norm=0.5), 1e-2

    step = t5_training.build_training_step(config, adam)
    training = TaskSession(
        inputs=list(step.inputs.values()),
        outputs=list(step.outputs.values()),
        state=NamedTensors(fwd=step.variables),
        ir=step.ir,
        device_desc="ipu_model",
    )
    mapping = t5_popxl.T5ForConditionalGeneration.hf_mapping
    training.write_variables_data(mapping(config, step.variables, model))
    with training:
        training.run(stream_inputs(config, step.inputs, {**data, "lr": lr}))
    training.save_checkpoint(str(tmp_path / "checkpoint"))

    torch_adam = adam.torch_reference(model.parameters(), lr)
    model(**data).loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), adam.max_norm)
    torch_adam.step()

    inference = t5_inference.build_inference(config)
    session = TaskSession(
        inputs=list(inference.inputs.values()),
        outputs=[inference.next_token, inference.next_token_logits],
        state=NamedTensors(fwd=inference.variables),
        ir=inference.ir,
        device_desc="ipu_model",
    )
    session.load_checkpoint(str(tmp_path / "checkpoint"), report_missing="error")
    assert session.session_state["steps"] == 1
    last = DECODER_LENGTH - 1
    feed = {**data, "last_token_index": np.full((BATCH,), last)}
    with session:
        outputs = session.run(stream_inputs(config, inference.inputs, feed))
    with torch.no_grad():
        logits = model(**data).logits[:, last].numpy()
    np.testing.assert_allclose(outputs[inference.next_token_logits], logits, rtol=1e-4, atol=1e-4)


def test_t5_phased_gradients_match_hugging_face() -> None:
    """Phased execution (weights and gradients in remote buffers, each stack a loop over its
    layers, each block's backward recomputing its forward from its stored input): the loss and
    the gradient of every weight against torch autograd."""
    model = hf_model(tie_word_embeddings=False)
    data = batch(model)
    out = model(**data)
    out.loss.backward()

    config = popxl_config(model)
    step = t5_phased.build_phased_step(config)
    mapping = t5_popxl.T5ForConditionalGeneration.hf_mapping
    weights = mapping(config, step.variables, model)
    assert set(weights) == set(step.variables.tensors)
    expected_grads = mapping(config, step.grads, gradients_as_model(model))
    assert set(expected_grads) == set(step.grads.tensors)

    with popxl.Session(step.ir, "ipu_model") as session:
        session.write_variables_data(weights)
        outputs = session.run(stream_inputs(config, step.inputs, data))
        grads = session.get_tensors_data(list(expected_grads))

    np.testing.assert_allclose(outputs[step.loss], out.loss.item(), rtol=1e-5)
    assert_gradients_close(grads, expected_grads)


def test_t5_cached_greedy_decoding_matches_hugging_face() -> None:
    """One token per run, the decoder's keys and values cached in variables updated in place:
    each step's logits and the greedy continuation against Hugging Face's (which attends over
    the whole prefix every step)."""
    model = hf_model(tie_word_embeddings=False)
    data = batch(model)
    config = popxl_config(model)
    decoding = t5_cached.build_cached_decoding(config)
    weights = t5_popxl.T5ForConditionalGeneration.hf_mapping(config, decoding.variables, model)
    caches = {t for t in decoding.variables.tensors if t.name.endswith("_cache")}
    assert len(caches) == 2 * config.num_decoder_layers
    assert set(weights) | caches == set(decoding.variables.tensors)

    ids = torch.full((BATCH, DECODER_LENGTH), model.config.decoder_start_token_id)
    with popxl.Session(decoding.ir, "ipu_model") as session:
        session.write_variables_data(weights)
        for t in range(DECODER_LENGTH - 1):
            feed = {**data, "token": ids[:, t : t + 1], "position": np.array([t])}
            logits = session.run(stream_inputs(config, decoding.inputs, feed))[decoding.logits]
            with torch.no_grad():
                expected = model(
                    input_ids=data["input_ids"],
                    attention_mask=data["attention_mask"],
                    decoder_input_ids=ids[:, : t + 1],
                ).logits[:, t]
            np.testing.assert_allclose(logits, expected.numpy(), rtol=1e-5, atol=1e-5)
            ids[:, t + 1] = expected.argmax(-1)
            np.testing.assert_array_equal(logits.argmax(-1), ids[:, t + 1].numpy())
