"""A ResNet image encoder written as Graphcore's PopXL vision models are (``resnet_popxl.py``,
``resnet_training.py``; MAGMA's CLIP ResNet encoder) against Hugging Face Transformers'
``ResNetModel`` / ``ResNetForImageClassification`` (4.25) of a tiny random config
(embedding 8, hidden sizes 16 and 32, one bottleneck per stage, batches of two 32 x 32
images, the batch norms' parameters and running statistics randomised): the stem's and
each bottleneck's output, the last features and their pooled mean, in float32 and in
float16, and with the bottleneck's 3x3 convolution grouped (ResNeXt's, the Hugging Face
model given the same grouped convolution); a fine-tuning step's loss, the gradient of
every trainable weight and the weights after two Adam steps, against torch autograd and
``optim.Adam``; CLIP's attention pool against a torch module written from its
definition. On ``ipu_model`` (and ``cpu``). torch and transformers missing skip this
module, except under CI (``CI=true``)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from reference_packages import reference, with_gradients

import popxl

torch = reference("torch")
transformers = reference("transformers")

import popxl_addons as addons  # noqa: E402
import resnet_popxl  # noqa: E402  (beside this file: tests/models/conftest.py puts it on the path)
import resnet_training  # noqa: E402
import t5_training  # noqa: E402
from popxl_addons.patterns import apply_pre_alias_patterns  # noqa: E402

TOL = {"rtol": 1e-5, "atol": 1e-5}


def config(**kwargs) -> resnet_popxl.ResNetConfig:
    return resnet_popxl.ResNetConfig(**kwargs)


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
    for _, hf_name in resnet_popxl.Encoder.names(cfg):
        conv = model.resnet.encoder.get_submodule(hf_name).layer[1].convolution
        if cfg.groups > 1:
            conv = torch.nn.Conv2d(conv.in_channels, conv.out_channels, 3, conv.stride, 1,
                                   groups=cfg.groups, bias=False)  # fmt: skip
            model.resnet.encoder.get_submodule(hf_name).layer[1].convolution = conv
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                c = module.num_features
                module.weight.copy_(1 + 0.3 * torch.randn(c))
                module.bias.copy_(0.3 * torch.randn(c))
                module.running_mean.copy_(0.3 * torch.randn(c))
                module.running_var.copy_(0.5 + torch.rand(c))
            elif isinstance(module, torch.nn.Conv2d) and cfg.groups > 1:
                torch.nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
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
    torch_adam = torch.optim.AdamW(
        model.parameters(),
        lr=lr,
        betas=(adam.beta1, adam.beta2),
        eps=adam.eps,
        weight_decay=adam.weight_decay,
    )
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


class CLIPAttentionPool(torch.nn.Module if torch else object):  # type: ignore[misc]
    """CLIP's ``AttentionPool2d`` from its definition: the class token (the positions'
    mean) attends over itself and the positions, with torch's multi-head attention."""

    def __init__(self, spatial: int, embed_dim: int, heads: int, output_dim: int):
        super().__init__()
        self.positional_embedding = torch.nn.Parameter(
            torch.randn(spatial**2 + 1, embed_dim) / embed_dim**0.5
        )
        self.k_proj = torch.nn.Linear(embed_dim, embed_dim)
        self.q_proj = torch.nn.Linear(embed_dim, embed_dim)
        self.v_proj = torch.nn.Linear(embed_dim, embed_dim)
        self.c_proj = torch.nn.Linear(embed_dim, output_dim)
        self.heads = heads

    def forward(self, x):
        x = x.flatten(start_dim=2).permute(2, 0, 1)  # NCHW -> (HW)NC
        x = torch.cat([x.mean(dim=0, keepdim=True), x], dim=0)
        x = x + self.positional_embedding[:, None, :]
        out, _ = torch.nn.functional.multi_head_attention_forward(
            query=x[:1],
            key=x,
            value=x,
            embed_dim_to_check=x.shape[-1],
            num_heads=self.heads,
            q_proj_weight=self.q_proj.weight,
            k_proj_weight=self.k_proj.weight,
            v_proj_weight=self.v_proj.weight,
            in_proj_weight=None,
            in_proj_bias=torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias]),
            bias_k=None,
            bias_v=None,
            add_zero_attn=False,
            dropout_p=0.0,
            out_proj_weight=self.c_proj.weight,
            out_proj_bias=self.c_proj.bias,
            use_separate_proj_weight=True,
            training=False,
            need_weights=False,
        )
        return out.squeeze(0)


def test_attention_pool_on_resnet_features() -> None:
    """CLIP's attention pool (4 heads, output 24) on the ResNet's last features (4 x 4
    positions of 32 channels), the ResNet and the pool in one program, against Hugging
    Face's ResNet followed by the torch reference pool."""
    cfg = config()
    hf_model = random_hf_model(cfg)
    torch.manual_seed(5)
    side, embed, heads, out_dim = 4, cfg.hidden_sizes[-1], 4, 24
    pool_t = CLIPAttentionPool(side, embed, heads, out_dim).eval()
    with torch.no_grad():
        for lin in (pool_t.q_proj, pool_t.k_proj, pool_t.v_proj, pool_t.c_proj):
            lin.bias.normal_(0, 0.1)
    x = pixels(cfg, 6)

    model = resnet_popxl.program(cfg, resnet_popxl.ResNetModel(cfg))
    ir, h2d, variables = model.ir, model.pixels, model.variables
    hidden = model.outputs[0]
    with ir.main_graph:
        pool_facts, pool_graph = resnet_popxl.AttentionPool2D(embed, heads, out_dim).create_graph(
            hidden
        )
        pool_vars = pool_facts.init("attnpool")
        (embedding,) = pool_graph.bind(pool_vars).call(hidden)
        d2h = addons.host_store(embedding)
    apply_pre_alias_patterns(ir, level="default")

    with popxl.Session(ir, "ipu_model") as session:
        session.write_variables_data(
            {
                **resnet_popxl.ResNetModel.hf_mapping(cfg, variables, hf_model.resnet),
                **resnet_popxl.AttentionPool2D.torch_mapping(cfg, pool_vars, pool_t),
            }
        )
        outputs = session.run({h2d: x})
    with torch.no_grad():
        features = hf_model.resnet(torch.tensor(x)).last_hidden_state
        assert features.shape[2:] == (side, side)
        want = pool_t(features).numpy()
    assert outputs[d2h].shape == (cfg.batch_size, out_dim)
    np.testing.assert_allclose(outputs[d2h], want, **TOL)
