"""A ResNet image encoder written as Graphcore's PopXL vision models are (``resnet_popxl.py``,
``resnet_training.py``; MAGMA's CLIP ResNet encoder) against Hugging Face Transformers'
``ResNetModel`` / ``ResNetForImageClassification`` (4.25; 4.57 from Python 3.12 on) of a
tiny random config (embedding 8, hidden sizes 16 and 32, one bottleneck per stage, batches
of two 32 x 32 images, the batch norms' parameters and running statistics randomised): the
stem's and each bottleneck's output, the last features and their pooled mean, in float32 and in
float16, and with the bottleneck's 3x3 convolution grouped (ResNeXt's, the Hugging Face
model given the same grouped convolution); a fine-tuning step's loss, the gradient of
every trainable weight and the weights after two Adam steps, against torch autograd and
``optim.AdamW`` (gradients clipped to their global norm); CLIP's attention pool on the
ResNet's features and CLIP's whole modified ResNet (``clip_resnet_popxl.py``, MAGMA's
image encoder) against torch models written from their definitions
(``clip_resnet_reference.py``). On ``ipu_model`` (and ``cpu``). torch and transformers
missing skip this module, except under CI (``CI=true``)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from reference_packages import reference, with_gradients

import popxl

torch = reference("torch")
transformers = reference("transformers")

import clip_resnet_popxl  # noqa: E402
import clip_resnet_reference  # noqa: E402
import popxl_addons as addons  # noqa: E402
import resnet_popxl  # noqa: E402  (beside this file: tests/models/conftest.py puts it on the path)
import resnet_training  # noqa: E402
import t5_training  # noqa: E402
from popxl_addons.patterns import apply_pre_alias_patterns  # noqa: E402

TOL = {"rtol": 1e-5, "atol": 1e-5}


def config(**kwargs) -> resnet_popxl.ResNetConfig:
    return resnet_popxl.ResNetConfig(**kwargs)


def randomise_batch_norms(model) -> None:
    """Batch norms' parameters and statistics away from their defaults."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                c = module.num_features
                module.weight.copy_(1 + 0.3 * torch.randn(c))
                module.bias.copy_(0.3 * torch.randn(c))
                module.running_mean.copy_(0.3 * torch.randn(c))
                module.running_var.copy_(0.5 + torch.rand(c))


def random_hf_model(cfg: resnet_popxl.ResNetConfig) -> transformers.ResNetForImageClassification:
    """The Hugging Face model of ``cfg``, its batch norms' parameters and statistics away
    from their defaults (so that their mapping matters); with ``cfg.groups`` > 1 each
    bottleneck's 3x3 convolution replaced by a grouped one (ResNeXt's)."""
    hf_config = transformers.ResNetConfig(
        num_channels=cfg.num_channels,
        embedding_size=cfg.embedding_size,
        hidden_sizes=list(cfg.hidden_sizes),
        depths=list(cfg.depths),
        layer_type="bottleneck",
        hidden_act="relu",
        downsample_in_first_stage=cfg.downsample_in_first_stage,
        num_labels=cfg.num_labels,
    )
    torch.manual_seed(3)
    model = transformers.ResNetForImageClassification(hf_config).eval()
    for _, hf_name in resnet_popxl.Encoder.names(cfg) if cfg.groups > 1 else ():
        layer = model.resnet.encoder.get_submodule(hf_name).layer[1]
        c_in, c_out, stride = (layer.convolution.in_channels, layer.convolution.out_channels,
                               layer.convolution.stride)  # fmt: skip
        layer.convolution = torch.nn.Conv2d(c_in, c_out, 3, stride, 1, groups=cfg.groups,
                                            bias=False)  # fmt: skip
        torch.nn.init.kaiming_normal_(layer.convolution.weight, mode="fan_out")  # HF's init
    randomise_batch_norms(model)
    return model


def pixels(cfg: resnet_popxl.ResNetConfig, seed: int) -> np.ndarray:
    shape = (cfg.batch_size, cfg.num_channels, cfg.image_size, cfg.image_size)
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def hf_layer_outputs(hf_model, x: np.ndarray) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """The stem's and each bottleneck's output, the last features and the pooled ones."""
    outputs: list[np.ndarray] = []
    resnet = hf_model.resnet
    modules = [resnet.embedder] + [
        layer for stage in resnet.encoder.stages for layer in stage.layers
    ]
    hooks = [
        m.register_forward_hook(lambda _m, _i, out: outputs.append(out.detach().numpy().copy()))
        for m in modules
    ]
    try:
        with torch.no_grad():
            result = resnet(torch.tensor(x))
    finally:
        for hook in hooks:
            hook.remove()
    return outputs, result.last_hidden_state.numpy(), result.pooler_output.numpy()


@pytest.mark.parametrize(
    "dtype, groups, device",
    [
        ("float32", 1, "ipu_model"),
        ("float16", 1, "ipu_model"),
        ("float32", 2, "ipu_model"),
        ("float32", 1, "cpu"),
    ],
)
def test_layer_outputs_and_pooled(dtype: str, groups: int, device: str) -> None:
    """``ResNetModel``'s features and pooled output, and in the same program the stem and
    each bottleneck graph bound to the model's own variables, each output streamed out. In
    float16 (weights, images and activations; Hugging Face's in float32) within 1% of each
    output's largest magnitude: float16's rounding over the five convolution levels (torch's
    own float16 model is 0.13% of the range away from its float32 one here, Tremula's 0.19%)."""
    cfg = config(dtype=popxl.dtypes.dtype.as_dtype(dtype), groups=groups)
    hf_model = random_hf_model(cfg)
    x = pixels(cfg, 1)
    np_dtype = cfg.dtype.as_numpy()

    model = resnet_popxl.program(cfg, resnet_popxl.ResNetModel(cfg))
    ir, h2d, px, variables = model.ir, model.pixels, model.pixel_values, model.variables
    with ir.main_graph:
        model_d2h = [addons.host_store(t) for t in model.outputs]

        _, stem = resnet_popxl.Embeddings(cfg).create_graph(px)
        (h,) = stem.bind(variables.embedder).call(px)
        layer_d2h = [addons.host_store(h)]
        encoder = resnet_popxl.Encoder(cfg)
        for name, _ in encoder.layer_names:
            _, layer = getattr(encoder, name).create_graph(h)
            (h,) = layer.bind(variables.encoder[name]).call(h)
            layer_d2h.append(addons.host_store(h))
    apply_pre_alias_patterns(ir, level="default")

    weights = resnet_popxl.ResNetModel.hf_mapping(cfg, variables, hf_model.resnet)
    with popxl.Session(ir, device) as session:
        session.write_variables_data(weights)
        outputs = session.run({h2d: x.astype(np_dtype)})

    expected_layers, expected_hidden, expected_pooled = hf_layer_outputs(hf_model, x)

    def check(got: np.ndarray, want: np.ndarray, what: str) -> None:
        assert got.dtype == np_dtype, what
        tol = TOL if dtype == "float32" else {"rtol": 1e-2, "atol": 1e-2 * np.abs(want).max()}
        np.testing.assert_allclose(got, want, err_msg=what, **tol)

    assert len(layer_d2h) == len(expected_layers) == 1 + len(cfg.depths)
    for n, (d2h, want) in enumerate(zip(layer_d2h, expected_layers)):
        check(outputs[d2h], want, f"layer {n}")
    check(outputs[model_d2h[0]], expected_hidden, "last_hidden_state")
    check(outputs[model_d2h[1]], expected_pooled, "pooler_output")
    assert np.abs(expected_pooled).max() > 0.1  # not a vanishing signal


def test_to_hf_round_trip() -> None:
    """``to_hf`` of ``hf_mapping``'s data is the Hugging Face state dict, key for key (but
    the batch norms' ``num_batches_tracked`` counters)."""
    cfg = config()
    hf_model = random_hf_model(cfg)
    ir = popxl.Ir()
    with ir.main_graph:
        px = popxl.variable(pixels(cfg, 0), name="pixels")
        facts, _ = resnet_popxl.ResNetForImageClassification(cfg).create_graph(px)
        variables = facts.init()
    mapped = resnet_popxl.ResNetForImageClassification.hf_mapping(cfg, variables, hf_model)
    assert set(mapped) == set(variables.tensors)
    state = resnet_popxl.ResNetForImageClassification.to_hf(cfg, variables.map(mapped.__getitem__))
    expected = {
        k: v for k, v in hf_model.state_dict().items() if not k.endswith("num_batches_tracked")
    }
    assert sorted(state) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(state[key].numpy(), value.numpy(), key)


def torch_loss(model, x: np.ndarray, labels: np.ndarray):
    logits = model(torch.tensor(x)).logits
    return torch.nn.functional.cross_entropy(logits, torch.tensor(labels, dtype=torch.long))


def test_gradients_of_every_weight() -> None:
    """The fine-tuning step without an optimizer: the loss and the accumulated gradient
    of every trainable weight (convolutions, batch norms' scales and shifts, classifier)
    against torch autograd of the model in eval mode (frozen statistics)."""
    cfg = config(trainable_batch_norm=True)
    hf_model = random_hf_model(cfg)
    x, labels = pixels(cfg, 2), np.array([3, 7], dtype=np.int32)
    hf_model.zero_grad()
    loss_t = torch_loss(hf_model, x, labels)
    loss_t.backward()
    grad_model = with_gradients(hf_model)

    step = resnet_training.training_step(cfg, adam=None)
    model = resnet_popxl.ResNetForImageClassification
    with popxl.Session(step.ir, "ipu_model") as session:
        session.write_variables_data(model.hf_mapping(cfg, step.variables, hf_model))
        outputs = session.run({step.inputs["pixels"]: x, step.inputs["labels"]: labels})
        grads = session.get_tensors_data(list(step.grads.tensors))

    np.testing.assert_allclose(outputs[step.outputs["loss"]], loss_t.item(), **TOL)
    expected = model.hf_mapping(cfg, step.variables, grad_model)
    by_name = step.variables.to_dict()
    trained = resnet_training.trainable(step.variables)
    assert len(trained) == len(list(hf_model.parameters()))
    for name, grad in step.grads.to_dict().items():
        want = expected[by_name[name]]
        assert np.abs(want).max() > 0, name  # every gradient reaches back to its weight
        np.testing.assert_allclose(grads[grad], want, rtol=1e-4, atol=1e-5, err_msg=name)


def test_adam_steps_match_torch() -> None:
    """Two fine-tuning steps with popxl-addons' Adam (AdamW's decoupled decay, the
    gradients clipped to their global norm; state carried over): each step's loss and
    gradient norm, and every weight after the second, against torch's
    ``clip_grad_norm_`` and ``optim.AdamW`` on the Hugging Face model in eval mode; the
    running statistics unchanged."""
    cfg = config(trainable_batch_norm=True)
    hf_model = random_hf_model(cfg)
    adam = t5_training.Adam(eps=1e-6, weight_decay=0.01, max_norm=1.0)
    lr = 1e-2
    model = copy.deepcopy(hf_model)
    torch_adam = adam.torch_reference(model.parameters(), lr)
    step = resnet_training.training_step(cfg, adam)
    mapping = resnet_popxl.ResNetForImageClassification.hf_mapping
    with popxl.Session(step.ir, "ipu_model") as session:
        session.write_variables_data(mapping(cfg, step.variables, hf_model))
        for seed in (4, 5):
            x = pixels(cfg, seed)
            labels = np.random.default_rng(seed).integers(0, cfg.num_labels, 2).astype(np.int32)
            torch_adam.zero_grad()
            loss = torch_loss(model, x, labels)
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), adam.max_norm)
            assert norm.item() > adam.max_norm  # the clipping matters
            torch_adam.step()
            outputs = session.run(
                {
                    step.inputs["pixels"]: x,
                    step.inputs["labels"]: labels,
                    step.inputs["lr"]: np.float32(lr),
                }
            )
            for name, want in (("loss", loss.item()), ("grad_norm", norm.item())):
                np.testing.assert_allclose(outputs[step.outputs[name]], want, rtol=1e-5)
        weights = session.get_tensors_data(list(step.variables.tensors))
    expected = mapping(cfg, step.variables, model)
    before = mapping(cfg, step.variables, hf_model)
    for t, want in expected.items():
        np.testing.assert_allclose(weights[t], want, rtol=1e-4, atol=1e-5, err_msg=t.name)
        moved = not t.name.endswith(resnet_training.FROZEN)
        assert moved == (not np.array_equal(weights[t], before[t])), t.name


def test_attention_pool_on_resnet_features() -> None:
    """CLIP's attention pool (4 heads, output 24) on the ResNet's last features (4 x 4
    positions of 32 channels), the ResNet and the pool in one program, against Hugging
    Face's ResNet followed by the torch reference pool."""
    cfg = config()
    hf_model = random_hf_model(cfg)
    torch.manual_seed(5)
    side, embed, heads, out_dim = 4, cfg.hidden_sizes[-1], 4, 24
    pool_t = clip_resnet_reference.AttentionPool2d(side, embed, heads, out_dim).eval()
    with torch.no_grad():
        for lin in (pool_t.q_proj, pool_t.k_proj, pool_t.v_proj, pool_t.c_proj):
            lin.bias.normal_(0, 0.1)
    x = pixels(cfg, 6)

    model = resnet_popxl.program(cfg, resnet_popxl.ResNetModel(cfg))
    ir, h2d, variables = model.ir, model.pixels, model.variables
    hidden = model.outputs[0]
    with ir.main_graph:
        pool_facts, pool_graph = clip_resnet_popxl.AttentionPool2D(
            embed, heads, out_dim
        ).create_graph(hidden)
        pool_vars = pool_facts.init("attnpool")
        (embedding,) = pool_graph.bind(pool_vars).call(hidden)
        d2h = addons.host_store(embedding)
    apply_pre_alias_patterns(ir, level="default")

    with popxl.Session(ir, "ipu_model") as session:
        session.write_variables_data(
            {
                **resnet_popxl.ResNetModel.hf_mapping(cfg, variables, hf_model.resnet),
                **clip_resnet_popxl.AttentionPool2D.torch_mapping(cfg, pool_vars, pool_t),
            }
        )
        outputs = session.run({h2d: x})
    with torch.no_grad():
        features = hf_model.resnet(torch.tensor(x)).last_hidden_state
        assert features.shape[2:] == (side, side)
        want = pool_t(features).numpy()
    assert outputs[d2h].shape == (cfg.batch_size, out_dim)
    np.testing.assert_allclose(outputs[d2h], want, **TOL)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_clip_modified_resnet(dtype: str) -> None:
    """CLIP's modified ResNet (MAGMA's image encoder; width 8, two stages of one
    bottleneck, the second strided by an average pool, a projection shortcut in each; 4
    heads over 4 x 4 positions of 64 channels, output 24) against the torch model written
    from its definition; float16 within 1% of the output's largest magnitude."""
    cfg = clip_resnet_popxl.CLIPResNetConfig(dtype=popxl.dtypes.dtype.as_dtype(dtype))
    torch.manual_seed(7)
    reference = clip_resnet_reference.ModifiedResNet(
        cfg.depths, cfg.output_dim, cfg.heads, cfg.image_size, cfg.width
    ).eval()
    randomise_batch_norms(reference)
    x = pixels(cfg, 8)

    model = resnet_popxl.program(cfg, clip_resnet_popxl.ModifiedResNet(cfg))
    with model.ir.main_graph:
        d2h = addons.host_store(model.outputs[0])
    apply_pre_alias_patterns(model.ir, level="default")
    weights = clip_resnet_popxl.ModifiedResNet.torch_mapping(cfg, model.variables, reference)
    assert set(weights) == set(model.variables.tensors)
    with popxl.Session(model.ir, "ipu_model") as session:
        session.write_variables_data(weights)
        got = session.run({model.pixels: x.astype(cfg.dtype.as_numpy())})[d2h]
    with torch.no_grad():
        want = reference(torch.tensor(x)).numpy()
    assert got.shape == (cfg.batch_size, cfg.output_dim)
    tol = TOL if dtype == "float32" else {"rtol": 1e-2, "atol": 1e-2 * np.abs(want).max()}
    np.testing.assert_allclose(got, want, **tol)
