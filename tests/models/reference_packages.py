"""The reference packages the model tests compare against (torch, Hugging Face Transformers:
the ``models`` extra): a missing one skips the test module, except under CI (``CI=true``),
where it must be installed."""

from __future__ import annotations

import copy
import importlib
import os
from types import ModuleType

import pytest


def reference(name: str) -> ModuleType:
    """The package ``name``; missing, the calling test module is skipped (outside CI)."""
    if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
        return importlib.import_module(name)
    return pytest.importorskip(name)


def with_gradients(module):
    """A copy of the torch ``module`` holding its parameters' gradients (zeros where none)
    as data, its buffers as they are: the model's ``hf_mapping`` lays them out as its
    variables."""
    import torch

    copied = copy.deepcopy(module)
    grads = {n: p.grad for n, p in module.named_parameters()}
    for name, parameter in copied.named_parameters():
        grad = grads[name]
        parameter.data = torch.zeros_like(parameter) if grad is None else grad.clone()
    return copied
