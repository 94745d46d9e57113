"""CLIP's modified ResNet image encoder (MAGMA's, ``multimodal/magma/popxl``) written as
Graphcore writes its PopXL models, on the layers of ``resnet_popxl.py``: the stem of three
3x3 convolutions and a 2x2 average pool; bottlenecks whose stride is an average pool
after the 3x3 convolution, the shortcut an average pool, a 1x1 convolution and batch
norm; and the attention pool (the positions' mean as a class token attending over the
positions). ``torch_mapping`` maps the weights of ``clip_resnet_reference.ModifiedResNet``
(OpenAI's parameter names: ``conv1``, ``bn1``, ``downsample.0``, ``attnpool.q_proj``...).

Client code for Tremula's tests (Tremula never imports it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import popxl_addons as addons
from popxl_addons import NamedTensors
from popxl_addons.layers import Linear
from resnet_popxl import ConvLayer, ResNetConfig

import popxl
from popxl import ops
from popxl.utils import to_numpy

#: output channels per bottleneck plane
EXPANSION = 4


@dataclass
class CLIPResNetConfig(ResNetConfig):
    """CLIP's ``ModifiedResNet(layers, output_dim, heads, input_resolution, width)``: the
    bottlenecks per stage are ``depths``, the images ``image_size`` (RN50: width 64,
    depths 3, 4, 6, 3, 32 heads, output 1024, 224 x 224)."""

    width: int = 8
    heads: int = 4
    output_dim: int = 24

    @property
    def embed_dim(self) -> int:
        return self.width * 2 ** (len(self.depths) - 1) * EXPANSION


def avg_pool(x: popxl.Tensor, stride: int) -> popxl.Tensor:
    """``nn.AvgPool2d(stride)``: windows of ``stride`` x ``stride``, not overlapping."""
    return ops.average_pool(x, kernel_size=(stride, stride), stride=(stride, stride))


class CLIPBottleneck(addons.Module):
    def __init__(self, config: CLIPResNetConfig, inplanes: int, planes: int, stride: int):
        super().__init__()
        self.stride = stride
        self.conv1 = ConvLayer(config, planes, kernel_size=1)
        self.conv2 = ConvLayer(config, planes, kernel_size=3)
        self.conv3 = ConvLayer(config, planes * EXPANSION, kernel_size=1, activation=False)
        self.has_downsample = stride > 1 or inplanes != planes * EXPANSION
        if self.has_downsample:
            self.downsample = ConvLayer(config, planes * EXPANSION, kernel_size=1, activation=False)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        out = self.conv2(self.conv1(x))
        if self.stride > 1:
            out = avg_pool(out, self.stride)
        out = self.conv3(out)
        identity = x
        if self.has_downsample:
            identity = self.downsample(avg_pool(x, self.stride) if self.stride > 1 else x)
        return ops.relu(out + identity)

    @staticmethod
    def torch_mapping(config: CLIPResNetConfig, variables: NamedTensors, block) -> dict:
        weights: dict = {}
        for n in (1, 2, 3):
            conv, bn = getattr(block, f"conv{n}"), getattr(block, f"bn{n}")
            weights.update(ConvLayer.torch_mapping(config, variables[f"conv{n}"], conv, bn))
        if block.downsample is not None:
            conv, bn = block.downsample[1], block.downsample[2]  # after the pool
            weights.update(ConvLayer.torch_mapping(config, variables.downsample, conv, bn))
        return weights


class AttentionPool2D(addons.Module):
    """CLIP's ``AttentionPool2d``: the ``H W`` positions of ``x`` ``[N, C, H, W]`` as a
    sequence, their mean prepended as a class token, a learnt positional embedding
    ``[H W + 1, C]`` added, then multi-head attention of the class token (the only query)
    over all ``H W + 1`` tokens with separate q / k / v projections, and the output
    projection ``c_proj``: ``[N, output]``."""

    def __init__(self, embed_dim: int, heads: int, output_dim: int | None = None):
        super().__init__()
        assert embed_dim % heads == 0, f"{embed_dim} channels in {heads} heads"
        self.heads = heads
        self.q_proj, self.k_proj, self.v_proj = (Linear(embed_dim) for _ in range(3))
        self.c_proj = Linear(output_dim or embed_dim)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        n, c, h, w = x.shape
        tokens = x.reshape((n, c, h * w)).transpose((0, 2, 1))  # [N, HW, C]
        cls = ops.mean(tokens, axis=1, keepdims=True)
        tokens = ops.concat([cls, tokens], axis=1)
        self.positional_embedding = self.add_variable_input(
            "positional_embedding",
            lambda: np.random.normal(0, c**-0.5, (h * w + 1, c)),
            x.dtype,
        )
        tokens = tokens + self.positional_embedding

        head_size = c // self.heads
        # [N, heads, 1, hs] @ [N, heads, hs, L] -> [N, heads, 1, L]
        q = self.q_proj(tokens[:, :1]).reshape((n, 1, self.heads, head_size))
        k = self.k_proj(tokens).reshape((n, h * w + 1, self.heads, head_size))
        v = self.v_proj(tokens).reshape((n, h * w + 1, self.heads, head_size))
        scores = q.transpose((0, 2, 1, 3)) @ k.transpose((0, 2, 3, 1))
        probs = ops.softmax(scores * (head_size**-0.5), axis=-1)
        attended = probs @ v.transpose((0, 2, 1, 3))  # [N, heads, 1, hs]
        return self.c_proj(attended.reshape((n, c)))

    @staticmethod
    def torch_mapping(config: ResNetConfig, variables: NamedTensors, pool) -> dict:
        """From a module with CLIP's ``AttentionPool2d`` parameters."""
        weights = {
            variables.positional_embedding: to_numpy(pool.positional_embedding.data, config.dtype)
        }
        for name in ("q_proj", "k_proj", "v_proj", "c_proj"):
            weights.update(Linear.torch_mapping(variables[name], getattr(pool, name), config.dtype))
        return weights


class ModifiedResNet(addons.Module):
    """Images ``[N, 3, size, size]`` to CLIP image embeddings ``[N, output_dim]``."""

    def __init__(self, config: CLIPResNetConfig):
        super().__init__()
        w = config.width
        self.conv1 = ConvLayer(config, w // 2, kernel_size=3, stride=2)
        self.conv2 = ConvLayer(config, w // 2, kernel_size=3)
        self.conv3 = ConvLayer(config, w, kernel_size=3)
        self.names = []
        inplanes = w
        for i, depth in enumerate(config.depths):
            planes = w * 2**i
            for d in range(depth):
                stride = 2 if i > 0 and d == 0 else 1
                name = f"layer{i}_{d}"
                setattr(self, name, CLIPBottleneck(config, inplanes, planes, stride))
                self.names.append(name)
                inplanes = planes * EXPANSION
        self.attnpool = AttentionPool2D(config.embed_dim, config.heads, config.output_dim)

    def build(self, pixel_values: popxl.Tensor) -> popxl.Tensor:
        x = self.conv3(self.conv2(self.conv1(pixel_values)))
        x = avg_pool(x, 2)
        for name in self.names:
            x = getattr(self, name)(x)
        return self.attnpool(x)

    @staticmethod
    def torch_mapping(config: CLIPResNetConfig, variables: NamedTensors, model) -> dict:
        """From ``clip_resnet_reference.ModifiedResNet``."""
        weights: dict = {}
        for n in (1, 2, 3):
            conv, bn = getattr(model, f"conv{n}"), getattr(model, f"bn{n}")
            weights.update(ConvLayer.torch_mapping(config, variables[f"conv{n}"], conv, bn))
        for i, stage in enumerate(model.stages):
            for d, block in enumerate(stage):
                layer = variables[f"layer{i}_{d}"]
                weights.update(CLIPBottleneck.torch_mapping(config, layer, block))
        weights.update(AttentionPool2D.torch_mapping(config, variables.attnpool, model.attnpool))
        return weights
