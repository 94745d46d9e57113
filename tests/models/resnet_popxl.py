"""A ResNet image encoder written as Graphcore writes its PopXL vision models (MAGMA's CLIP
ResNet encoder, ``multimodal/magma/popxl``): popxl-addons ``Module`` s whose weights are
``add_variable_input`` s, ``popxl_addons.layers.Conv2D`` for the convolutions, batch
normalisation with frozen statistics, ReLU, max and average pooling, bottleneck blocks with
a projection shortcut. Each module's static ``hf_mapping`` maps Hugging Face's
``ResNetModel`` / ``ResNetForImageClassification`` (transformers 4.25, 4.57) weights to the data of
its variables, ``to_hf`` maps them back.

Batch normalisation is ``ops.batch_norm_inference`` (PopART's ``BatchNormOp`` in inference
mode, through which autodiff refuses to go), or, for fine-tuning through the frozen statistics
(``ResNetConfig.trainable_batch_norm``), the same affine map written with element-wise ops:
``x * scale + shift``, ``scale = weight / sqrt(running_var + eps)``,
``shift = bias - running_mean * scale``, differentiable in every variable.

Client code for Tremula's tests (Tremula never imports it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import popxl_addons as addons
from popxl_addons import NamedTensors
from popxl_addons.layers import Conv2D, Linear

import popxl
from popxl import ops
from popxl.utils import to_numpy


@dataclass
class ResNetConfig:
    """Hugging Face's ``ResNetConfig`` fields this model reads (ResNet-50 is embedding 64,
    hidden sizes 256..2048, depths 3, 4, 6, 3, 224 x 224 images)."""

    num_channels: int = 3
    embedding_size: int = 8
    hidden_sizes: tuple[int, ...] = (16, 32)
    depths: tuple[int, ...] = (1, 1)
    #: the bottleneck's 1x1 reduction of the channels (``ResNetBottleNeckLayer.reduction``)
    reduction: int = 4
    #: groups of the bottleneck's 3x3 convolution (1 in ResNet; ResNeXt's cardinality)
    groups: int = 1
    downsample_in_first_stage: bool = False
    image_size: int = 32
    batch_size: int = 2
    num_labels: int = 10
    batch_norm_eps: float = 1e-5  # torch's nn.BatchNorm2d default
    #: batch norm as element-wise ops (differentiable) instead of ``batch_norm_inference``
    trainable_batch_norm: bool = False
    dtype: popxl.dtype = field(default=popxl.float32)


@dataclass
class Program:
    """A main graph calling a module on streamed images (:func:`program`); more ops may be
    added in ``with program.ir.main_graph``."""

    ir: popxl.Ir
    pixels: popxl.HostToDeviceStream
    pixel_values: popxl.Tensor
    variables: NamedTensors
    outputs: tuple[popxl.Tensor, ...]


def program(config: ResNetConfig, module: addons.Module) -> Program:
    """``module`` (its graph made by ``create_graph``) called in a new Ir's main graph with
    fresh variables on images ``[batch, channels, size, size]`` loaded from a stream."""
    shape = (config.batch_size, config.num_channels, config.image_size, config.image_size)
    ir = popxl.Ir()
    with ir.main_graph:
        h2d = popxl.h2d_stream(shape, config.dtype, name="pixels")
        pixel_values = ops.host_load(h2d)
        facts, graph = module.create_graph(pixel_values)
        variables = facts.init()
        outputs = graph.bind(variables).call(pixel_values)
    return Program(ir, h2d, pixel_values, variables, tuple(outputs))


def torch_tensor(x: np.ndarray):
    import torch  # the models extra: only the Hugging Face conversions need it

    return torch.tensor(np.ascontiguousarray(x), dtype=torch.float32)


def prefixed(prefix: str, state_dict: dict) -> dict:
    return {f"{prefix}.{k}": v for k, v in state_dict.items()}


class BatchNorm2D(addons.Module):
    """``nn.BatchNorm2d`` in eval mode: per channel (axis 1),
    ``(x - running_mean) / sqrt(running_var + eps) * weight + bias``."""

    NAMES = ("weight", "bias", "running_mean", "running_var")

    def __init__(self, config: ResNetConfig):
        super().__init__()
        self.config = config

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        c, dtype, eps = x.shape[1], x.dtype, self.config.batch_norm_eps
        inits = {"weight": np.ones, "bias": np.zeros, "running_mean": np.zeros,
                 "running_var": np.ones}  # fmt: skip
        v = {n: self.add_variable_input(n, lambda f=inits[n]: f((c,)), dtype) for n in self.NAMES}
        if not self.config.trainable_batch_norm:
            return ops.batch_norm_inference(
                x, v["weight"], v["bias"], v["running_mean"], v["running_var"], epsilon=eps
            )
        scale = v["weight"] / ops.sqrt(v["running_var"] + eps)
        shift = v["bias"] - v["running_mean"] * scale
        return x * scale.reshape((c, 1, 1)) + shift.reshape((c, 1, 1))

    @staticmethod
    def hf_mapping(config: ResNetConfig, variables: NamedTensors, hf_model) -> dict:
        """From ``nn.BatchNorm2d`` (its parameters and its running statistics)."""
        return {variables[n]: to_numpy(getattr(hf_model, n).data, config.dtype) for n in
                BatchNorm2D.NAMES}  # fmt: skip

    @staticmethod
    def to_hf(variables_data: NamedTensors) -> dict:
        return {n: torch_tensor(variables_data[n]) for n in BatchNorm2D.NAMES}


class ConvLayer(addons.Module):
    """``ResNetConvLayer``: a convolution without bias (padding ``kernel // 2`` on every
    side), batch norm and, unless ``activation`` is False, ReLU."""

    def __init__(
        self,
        config: ResNetConfig,
        out_channels: int,
        kernel_size: int = 3,
        stride: int = 1,
        activation: bool = True,
        padding: int | None = None,
        groups: int = 1,
    ):
        super().__init__()
        pad = kernel_size // 2 if padding is None else padding
        self.conv = Conv2D(
            out_channels,
            kernel_size,
            strides=(stride, stride),
            paddings=(pad,) * 4,
            groups=groups,
            bias=False,
        )
        self.norm = BatchNorm2D(config)
        self.activation = activation

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        x = self.norm(self.conv(x))
        return ops.relu(x) if self.activation else x

    @staticmethod
    def hf_mapping(config: ResNetConfig, variables: NamedTensors, hf_model) -> dict:
        """From ``ResNetConvLayer`` or ``ResNetShortCut`` (``convolution``, ``normalization``)."""
        return ConvLayer.torch_mapping(
            config, variables, hf_model.convolution, hf_model.normalization
        )

    @staticmethod
    def torch_mapping(config: ResNetConfig, variables: NamedTensors, conv, norm) -> dict:
        """From an ``nn.Conv2d`` and the ``nn.BatchNorm2d`` after it."""
        return {
            **Conv2D.torch_mapping(variables.conv, conv, config.dtype),
            **BatchNorm2D.hf_mapping(config, variables.norm, norm),
        }

    @staticmethod
    def to_hf(variables_data: NamedTensors) -> dict:
        return {
            "convolution.weight": torch_tensor(variables_data.conv.weight),
            **prefixed("normalization", BatchNorm2D.to_hf(variables_data.norm)),
        }


class Embeddings(addons.Module):
    """``ResNetEmbeddings``: the 7x7 stride-2 convolution, then a 3x3 stride-2 max pool
    padded by 1."""

    def __init__(self, config: ResNetConfig):
        super().__init__()
        self.embedder = ConvLayer(config, config.embedding_size, kernel_size=7, stride=2)

    def build(self, pixel_values: popxl.Tensor) -> popxl.Tensor:
        x = self.embedder(pixel_values)
        return ops.max_pool(x, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1, 1, 1))

    @staticmethod
    def hf_mapping(config: ResNetConfig, variables: NamedTensors, hf_model) -> dict:
        return ConvLayer.hf_mapping(config, variables.embedder, hf_model.embedder)

    @staticmethod
    def to_hf(variables_data: NamedTensors) -> dict:
        return prefixed("embedder", ConvLayer.to_hf(variables_data.embedder))


class BottleNeckLayer(addons.Module):
    """``ResNetBottleNeckLayer``: 1x1 down to ``out_channels / reduction``, 3x3 (strided),
    1x1 up to ``out_channels`` without ReLU, plus the shortcut (a strided 1x1 projection
    with batch norm when the shape changes, else the input), then ReLU."""

    def __init__(self, config: ResNetConfig, in_channels: int, out_channels: int, stride: int):
        super().__init__()
        reduced = out_channels // config.reduction
        self.has_shortcut = in_channels != out_channels or stride != 1
        if self.has_shortcut:
            self.shortcut = ConvLayer(
                config, out_channels, kernel_size=1, stride=stride, activation=False, padding=0
            )
        self.reduce = ConvLayer(config, reduced, kernel_size=1)
        self.conv = ConvLayer(config, reduced, stride=stride, groups=config.groups)
        self.expand = ConvLayer(config, out_channels, kernel_size=1, activation=False)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        residual = self.shortcut(x) if self.has_shortcut else x
        return ops.relu(self.expand(self.conv(self.reduce(x))) + residual)

    @staticmethod
    def hf_mapping(config: ResNetConfig, variables: NamedTensors, hf_model) -> dict:
        """From ``ResNetBottleNeckLayer`` (``layer.0..2``, ``shortcut``)."""
        weights: dict = {}
        for n, name in enumerate(("reduce", "conv", "expand")):
            weights.update(ConvLayer.hf_mapping(config, variables[name], hf_model.layer[n]))
        if "shortcut" in variables:
            weights.update(ConvLayer.hf_mapping(config, variables.shortcut, hf_model.shortcut))
        return weights

    @staticmethod
    def to_hf(variables_data: NamedTensors) -> dict:
        state: dict = {}
        for n, name in enumerate(("reduce", "conv", "expand")):
            state.update(prefixed(f"layer.{n}", ConvLayer.to_hf(variables_data[name])))
        if "shortcut" in variables_data:
            state.update(prefixed("shortcut", ConvLayer.to_hf(variables_data.shortcut)))
        return state


def stage_layers(config: ResNetConfig) -> list[tuple[int, int, int, int, int]]:
    """``(stage, depth, in_channels, out_channels, stride)`` of every bottleneck, in order
    (``ResNetEncoder``: each stage but the first halves the resolution in its first layer)."""
    layers = []
    in_channels = config.embedding_size
    for s, (out_channels, depth) in enumerate(zip(config.hidden_sizes, config.depths)):
        first_stride = 2 if s > 0 or config.downsample_in_first_stage else 1
        for d in range(depth):
            layers.append((s, d, in_channels, out_channels, first_stride if d == 0 else 1))
            in_channels = out_channels
    return layers


class Encoder(addons.Module):
    """``ResNetEncoder``: the stages' bottlenecks, the variables of stage ``s``'s layer
    ``d`` named ``stage{s}_layer{d}`` (Hugging Face's ``stages.{s}.layers.{d}``)."""

    def __init__(self, config: ResNetConfig):
        super().__init__()
        self.layer_names = self.names(config)
        for (name, _), (*_, c_in, c_out, stride) in zip(self.layer_names, stage_layers(config)):
            setattr(self, name, BottleNeckLayer(config, c_in, c_out, stride))

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        for name, _ in self.layer_names:
            x = getattr(self, name)(x)
        return x

    @staticmethod
    def names(config: ResNetConfig) -> list[tuple[str, str]]:
        """(variable prefix, Hugging Face prefix) of each bottleneck, in order."""
        return [(f"stage{s}_layer{d}", f"stages.{s}.layers.{d}") for s, d, *_ in
                stage_layers(config)]  # fmt: skip

    @staticmethod
    def hf_mapping(config: ResNetConfig, variables: NamedTensors, hf_model) -> dict:
        weights: dict = {}
        for name, hf_name in Encoder.names(config):
            hf_layer = hf_model.get_submodule(hf_name)
            weights.update(BottleNeckLayer.hf_mapping(config, variables[name], hf_layer))
        return weights

    @staticmethod
    def to_hf(config: ResNetConfig, variables_data: NamedTensors) -> dict:
        state: dict = {}
        for name, hf_name in Encoder.names(config):
            state.update(prefixed(hf_name, BottleNeckLayer.to_hf(variables_data[name])))
        return state


class ResNetModel(addons.Module):
    """``ResNetModel``: pixels ``[N, C, H, W]`` to the last stage's features and their
    spatial mean ``[N, hidden, 1, 1]`` (the pooler: an average pool over the whole map)."""

    def __init__(self, config: ResNetConfig):
        super().__init__()
        self.config = config
        self.embedder = Embeddings(config)
        self.encoder = Encoder(config)

    def build(self, pixel_values: popxl.Tensor) -> tuple[popxl.Tensor, popxl.Tensor]:
        hidden = self.encoder(self.embedder(pixel_values))
        pooled = ops.average_pool(hidden, kernel_size=hidden.shape[2:])
        return hidden, pooled

    @staticmethod
    def hf_mapping(config: ResNetConfig, variables: NamedTensors, hf_model) -> dict:
        """From ``ResNetModel``."""
        return {
            **Embeddings.hf_mapping(config, variables.embedder, hf_model.embedder),
            **Encoder.hf_mapping(config, variables.encoder, hf_model.encoder),
        }

    @staticmethod
    def to_hf(config: ResNetConfig, variables_data: NamedTensors) -> dict:
        return {
            **prefixed("embedder", Embeddings.to_hf(variables_data.embedder)),
            **prefixed("encoder", Encoder.to_hf(config, variables_data.encoder)),
        }


class ResNetForImageClassification(addons.Module):
    """``ResNetForImageClassification``: the pooled features flattened, then a linear
    classifier: logits ``[N, num_labels]``."""

    def __init__(self, config: ResNetConfig):
        super().__init__()
        self.config = config
        self.resnet = ResNetModel(config)
        self.classifier = Linear(config.num_labels)

    def build(self, pixel_values: popxl.Tensor) -> popxl.Tensor:
        _, pooled = self.resnet(pixel_values)
        return self.classifier(pooled.reshape((pooled.shape[0], -1)))

    @staticmethod
    def hf_mapping(config: ResNetConfig, variables: NamedTensors, hf_model) -> dict:
        """From ``ResNetForImageClassification`` (``resnet``, ``classifier.1``)."""
        return {
            **ResNetModel.hf_mapping(config, variables.resnet, hf_model.resnet),
            **Linear.torch_mapping(variables.classifier, hf_model.classifier[1], config.dtype),
        }

    @staticmethod
    def to_hf(config: ResNetConfig, variables_data: NamedTensors) -> dict:
        """The state dict (batch norms' ``num_batches_tracked`` left out)."""
        classifier = variables_data.classifier
        return {
            **prefixed("resnet", ResNetModel.to_hf(config, variables_data.resnet)),
            "classifier.1.weight": torch_tensor(classifier.weight.T),
            "classifier.1.bias": torch_tensor(classifier.bias),
        }
