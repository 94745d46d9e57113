"""CLIP's modified ResNet image encoder in torch, written from its definition (Radford et
al. 2021, "Learning Transferable Visual Models From Natural Language Supervision", and
OpenAI's ``clip/model.py``): a stem of three 3x3 convolutions (the first strided) and a
2x2 average pool instead of the 7x7 convolution and max pool; bottlenecks (expansion 4)
whose stride is an average pool after the 3x3 convolution ("anti-aliased"), the shortcut
an average pool, a 1x1 convolution and batch norm; and an attention pool in place of the
global average: the positions' mean as a class token attending over itself and the
positions (learnt positional embedding, separate q / k / v projections, an output
projection). MAGMA's image encoder is this model. Batch norms in eval mode.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

__all__ = ["AttentionPool2d", "Bottleneck", "ModifiedResNet"]


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.avgpool = nn.AvgPool2d(stride) if stride > 1 else nn.Identity()
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.downsample = None
        if stride > 1 or inplanes != planes * self.expansion:
            self.downsample = nn.Sequential(
                OrderedDict(
                    [
                        ("-1", nn.AvgPool2d(stride)),
                        ("0", nn.Conv2d(inplanes, planes * self.expansion, 1, bias=False)),
                        ("1", nn.BatchNorm2d(planes * self.expansion)),
                    ]
                )
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(self.avgpool(out)))
        identity = x if self.downsample is None else self.downsample(x)
        return torch.relu(out + identity)


class AttentionPool2d(nn.Module):
    def __init__(self, spatial: int, embed_dim: int, heads: int, output_dim: int):
        super().__init__()
        self.positional_embedding = nn.Parameter(
            torch.randn(spatial**2 + 1, embed_dim) / embed_dim**0.5
        )
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.c_proj = nn.Linear(embed_dim, output_dim)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(start_dim=2).permute(2, 0, 1)  # NCHW -> (HW)NC
        x = torch.cat([x.mean(dim=0, keepdim=True), x], dim=0)
        x = x + self.positional_embedding[:, None, :]
        out, _ = nn.functional.multi_head_attention_forward(
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


class ModifiedResNet(nn.Module):
    """``layers`` bottlenecks per stage, stage ``i`` of ``width * 2**i`` planes (strided
    but the first); the attention pool over the last stage's ``embed_dim`` channels."""

    def __init__(self, layers, output_dim: int, heads: int, input_resolution: int, width: int):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width // 2, 3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width // 2)
        self.conv2 = nn.Conv2d(width // 2, width // 2, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width // 2)
        self.conv3 = nn.Conv2d(width // 2, width, 3, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(width)
        self.avgpool = nn.AvgPool2d(2)
        self._inplanes = width
        self.stages = nn.ModuleList(
            self._make_layer(width * 2**i, n, stride=1 if i == 0 else 2)
            for i, n in enumerate(layers)
        )
        embed_dim = self._inplanes
        spatial = input_resolution // (4 * 2 ** (len(layers) - 1))
        self.attnpool = AttentionPool2d(spatial, embed_dim, heads, output_dim)

    def _make_layer(self, planes: int, blocks: int, stride: int) -> nn.Sequential:
        layers = [Bottleneck(self._inplanes, planes, stride)]
        self._inplanes = planes * Bottleneck.expansion
        layers += [Bottleneck(self._inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv, bn in ((self.conv1, self.bn1), (self.conv2, self.bn2), (self.conv3, self.bn3)):
            x = torch.relu(bn(conv(x)))
        x = self.avgpool(x)
        for stage in self.stages:
            x = stage(x)
        return self.attnpool(x)
