"""The public normalisation functions: group norm (``group_norm_*``, ``group_normalise``),
layer norm (``layer_norm_*``, ``layer_normalise``) and batch norm (``batch_norm_*``,
``batch_normalise``), PopLibs' ``popnn::gn`` / ``ln`` / ``bn`` in snake_case. The
semantics and layouts are in ``norms.py``.

The number of groups of the functions after the statistics is inferred from the size of
the statistics (``batch * groups`` elements), as PopLibs infers it. Every function
validates all its arguments (a :class:`PopnnError` naming the operand) before adding
anything to the graph.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tremula import poplar
from tremula.libs.popnn import norms
from tremula.libs.popnn.common import PopnnError

Options = Mapping[str, Any] | None
_GROUP, _LAYER, _BATCH = "group", "layer", "batch"


def _groups_from_stats(acts: poplar.Tensor, stats: Any, kind: str, where: str) -> int:
    """The group count implied by a statistics tensor (0 for batch norm)."""
    if kind == _BATCH:
        return 0
    if kind == _LAYER:
        return 1
    if not isinstance(stats, poplar.Tensor):
        raise PopnnError(f"{where}: inv_std_dev must be a Tensor, got {type(stats).__name__}")
    b = acts.shape[0] if acts.rank else 1
    n = stats.num_elements
    if b == 0 or n % b or n == 0:
        raise PopnnError(
            f"{where}: inv_std_dev has {n} elements, not a positive multiple of the batch "
            f"size {b} (expected batch * num_groups)"
        )
    return n // b


def _setup(
    graph: poplar.Graph, acts: Any, inv: Any, kind: str, options: Options, where: str
) -> tuple[poplar.Tensor, norms.Norm]:
    acts = norms.check_acts(graph, acts, where)
    groups = _groups_from_stats(acts, inv, kind, where)
    return acts, norms.make_norm(acts, groups, options, where)


def _statistics(graph, acts, eps, prog, groups, unbiased, stable, partials, name, options, fn):
    where = f"popnn.{fn}{f' {name!r}' if name else ''}"
    acts = norms.check_acts(graph, acts, where)
    eps = norms.check_eps(eps, where)
    norms.check_partials(partials, where)
    norm = norms.make_norm(acts, groups, options, where)
    return norms.statistics(graph, norm, acts, eps, prog, bool(unbiased), bool(stable), name or fn)


def _whiten(graph, acts, mean, inv, prog, kind, name, options, fn):
    where = f"popnn.{fn}{f' {name!r}' if name else ''}"
    acts, norm = _setup(graph, acts, inv, kind, options, where)
    st = norms.check_stats(graph, norm, acts, {"mean": mean, "inv_std_dev": inv}, where)
    if st["mean"] is None:
        raise PopnnError(f"{where}: mean must be a Tensor, got None")
    return norms.whiten(graph, norm, acts, st["mean"], st["inv_std_dev"], prog, name or fn)


def _normalise(graph, acts, gamma, beta, mean, inv, prog, kind, name, options, fn):
    where = f"popnn.{fn}{f' {name!r}' if name else ''}"
    acts, norm = _setup(graph, acts, inv, kind, options, where)
    st = norms.check_stats(graph, norm, acts, {"mean": mean, "inv_std_dev": inv}, where)
    if st["mean"] is None:
        raise PopnnError(f"{where}: mean must be a Tensor, got None")
    norms.check_channels(graph, norm, acts, {"gamma": gamma, "beta": beta}, where)
    return norms.normalise(
        graph, norm, acts, gamma, beta, st["mean"], st["inv_std_dev"], prog, name or fn
    )


def _param_grads(graph, acts, grads_in, mean, inv, prog, kind, partials, name, options, fn):
    where = f"popnn.{fn}{f' {name!r}' if name else ''}"
    acts, norm = _setup(graph, acts, inv, kind, options, where)
    grads_in = norms.check_grads(graph, acts, grads_in, where)
    st = norms.check_stats(graph, norm, acts, {"mean": mean, "inv_std_dev": inv}, where)
    norms.check_partials(partials, where)
    return norms.param_gradients(
        graph, norm, acts, grads_in, st["mean"], st["inv_std_dev"], prog, name or fn
    )


def _grads(graph, acts, grads_in, mean, inv, gamma, prog, kind, partials, name, options, fn):
    where = f"popnn.{fn}{f' {name!r}' if name else ''}"
    acts, norm = _setup(graph, acts, inv, kind, options, where)
    grads_in = norms.check_grads(graph, acts, grads_in, where)
    st = norms.check_stats(graph, norm, acts, {"mean": mean, "inv_std_dev": inv}, where)
    norms.check_channels(graph, norm, acts, {"gamma": gamma}, where)
    norms.check_partials(partials, where)
    return norms.gradients(
        graph, norm, acts, grads_in, st["mean"], st["inv_std_dev"], gamma, prog, name or fn
    )


# ---- group norm ----


def group_norm_statistics(
    graph: poplar.Graph,
    acts: poplar.Tensor,
    eps: float,
    prog: poplar.Sequence,
    num_groups: int,
    unbiased_var_estimate: bool = False,
    stable_algo: bool = False,
    partials_type: Any = poplar.FLOAT,
    name: str = "",
    options: Options = None,
) -> tuple[poplar.Tensor, poplar.Tensor]:
    """Mean and inverse standard deviation per (sample, group) (PopLibs'
    ``groupNormStatistics``).

    Args:
        graph: the graph.
        acts: ``[batch, channels, *field]`` float or half, mapped.
        eps: added to the variance inside the square root (>= 0).
        prog: the sequence the programs are appended to.
        num_groups: groups of channels; divides the channel count.
        unbiased_var_estimate: divide the variance by ``n - 1`` instead of ``n``.
        stable_algo: compute the variance as ``E[(x - mean)^2]`` (two passes).
        partials_type: the accumulation type (float).
        name: debug prefix.
        options: ``groupNormStridedChannelGrouping`` (default True: group ``g`` holds
            channels ``g, g + G, ...``; False: consecutive channels).

    Returns:
        ``(mean, inv_std_dev)``, each ``[batch * num_groups]`` of ``acts``' type.

    Raises:
        PopnnError: bad acts, eps, num_groups (not dividing the channels), options.
    """
    return _statistics(
        graph, acts, eps, prog, norms.check_groups(num_groups, "popnn.group_norm_statistics"),
        unbiased_var_estimate, stable_algo, partials_type, name, options, "group_norm_statistics",
    )  # fmt: skip


def group_norm_whiten(
    graph: poplar.Graph,
    acts: poplar.Tensor,
    mean: poplar.Tensor,
    inv_std_dev: poplar.Tensor,
    prog: poplar.Sequence,
    name: str = "",
    options: Options = None,
) -> poplar.Tensor:
    """``(acts - mean) * inv_std_dev`` per group, shaped like ``acts`` (PopLibs'
    ``groupNormWhiten``). Statistics as returned by :func:`group_norm_statistics`."""
    return _whiten(graph, acts, mean, inv_std_dev, prog, _GROUP, name, options, "group_norm_whiten")


def group_normalise(
    graph: poplar.Graph,
    acts: poplar.Tensor,
    gamma: poplar.Tensor,
    beta: poplar.Tensor,
    mean: poplar.Tensor,
    inv_std_dev: poplar.Tensor,
    prog: poplar.Sequence,
    name: str = "",
    options: Options = None,
) -> tuple[poplar.Tensor, poplar.Tensor]:
    """``(gamma * whitened + beta, whitened)`` (PopLibs' ``groupNormalise``); ``gamma`` and
    ``beta`` are ``[channels]`` of ``acts``' type.

    Raises:
        PopnnError: operands of the wrong shape or type, naming the operand.
    """
    return _normalise(
        graph, acts, gamma, beta, mean, inv_std_dev, prog, _GROUP, name, options, "group_normalise"
    )


def group_norm_param_gradients(
    graph: poplar.Graph,
    acts: poplar.Tensor,
    grads_in: poplar.Tensor,
    mean: poplar.Tensor | None,
    inv_std_dev: poplar.Tensor,
    prog: poplar.Sequence,
    partials_type: Any = poplar.FLOAT,
    name: str = "",
    options: Options = None,
) -> tuple[poplar.Tensor, poplar.Tensor]:
    """``(gamma_delta, beta_delta)``, each ``[channels]`` (PopLibs'
    ``groupNormParamGradients``). ``mean=None``: ``acts`` are the whitened activations."""
    return _param_grads(
        graph, acts, grads_in, mean, inv_std_dev, prog, _GROUP, partials_type, name, options,
        "group_norm_param_gradients",
    )  # fmt: skip


def group_norm_gradients(
    graph: poplar.Graph,
    acts: poplar.Tensor,
    grads_in: poplar.Tensor,
    mean: poplar.Tensor | None,
    inv_std_dev: poplar.Tensor,
    gamma: poplar.Tensor,
    prog: poplar.Sequence,
    partials_type: Any = poplar.FLOAT,
    name: str = "",
    options: Options = None,
) -> poplar.Tensor:
    """The gradient at the input of a group norm, shaped like ``acts`` (PopLibs'
    ``groupNormGradients``). ``mean=None``: ``acts`` are the whitened activations."""
    return _grads(
        graph, acts, grads_in, mean, inv_std_dev, gamma, prog, _GROUP, partials_type, name,
        options, "group_norm_gradients",
    )  # fmt: skip


# ---- layer norm: one group per sample ----


def layer_norm_statistics(
    graph: poplar.Graph,
    acts: poplar.Tensor,
    eps: float,
    prog: poplar.Sequence,
    unbiased_var_estimate: bool = False,
    stable_algo: bool = False,
    partials_type: Any = poplar.FLOAT,
    name: str = "",
) -> tuple[poplar.Tensor, poplar.Tensor]:
    """Mean and inverse standard deviation per sample over all non-batch dimensions,
    each ``[batch]`` (PopLibs' ``layerNormStatistics``); arguments as
    :func:`group_norm_statistics`."""
    return _statistics(
        graph, acts, eps, prog, 1, unbiased_var_estimate, stable_algo, partials_type, name,
        None, "layer_norm_statistics",
    )  # fmt: skip


def layer_norm_whiten(
    graph: poplar.Graph,
    acts: poplar.Tensor,
    mean: poplar.Tensor,
    inv_std_dev: poplar.Tensor,
    prog: poplar.Sequence,
    name: str = "",
) -> poplar.Tensor:
    """``(acts - mean) * inv_std_dev`` per sample (PopLibs' ``layerNormWhiten``)."""
    return _whiten(graph, acts, mean, inv_std_dev, prog, _LAYER, name, None, "layer_norm_whiten")


def layer_normalise(
    graph: poplar.Graph,
    acts: poplar.Tensor,
    gamma: poplar.Tensor,
    beta: poplar.Tensor,
    mean: poplar.Tensor,
    inv_std_dev: poplar.Tensor,
    prog: poplar.Sequence,
    name: str = "",
) -> tuple[poplar.Tensor, poplar.Tensor]:
    """``(gamma * whitened + beta, whitened)`` with per-channel ``gamma`` / ``beta``
    ``[channels]`` (PopLibs' ``layerNormalise``)."""
    return _normalise(
        graph, acts, gamma, beta, mean, inv_std_dev, prog, _LAYER, name, None, "layer_normalise"
    )


def layer_norm_param_gradients(
    graph: poplar.Graph,
    acts: poplar.Tensor,
    grads_in: poplar.Tensor,
    mean: poplar.Tensor | None,
    inv_std_dev: poplar.Tensor,
    prog: poplar.Sequence,
    partials_type: Any = poplar.FLOAT,
    name: str = "",
) -> tuple[poplar.Tensor, poplar.Tensor]:
    """``(gamma_delta, beta_delta)``, each ``[channels]`` (PopLibs'
    ``layerNormParamGradients``); ``mean=None``: ``acts`` are whitened."""
    return _param_grads(
        graph, acts, grads_in, mean, inv_std_dev, prog, _LAYER, partials_type, name, None,
        "layer_norm_param_gradients",
    )  # fmt: skip


def layer_norm_gradients(
    graph: poplar.Graph,
    acts: poplar.Tensor,
    grads_in: poplar.Tensor,
    mean: poplar.Tensor | None,
    inv_std_dev: poplar.Tensor,
    gamma: poplar.Tensor,
    prog: poplar.Sequence,
    partials_type: Any = poplar.FLOAT,
    name: str = "",
) -> poplar.Tensor:
    """The gradient at the input of a layer norm (PopLibs' ``layerNormGradients``);
    ``mean=None``: ``acts`` are whitened."""
    return _grads(
        graph, acts, grads_in, mean, inv_std_dev, gamma, prog, _LAYER, partials_type, name,
        None, "layer_norm_gradients",
    )  # fmt: skip


# ---- batch norm: per channel over the batch and the field ----


def batch_norm_statistics(
    graph: poplar.Graph,
    acts: poplar.Tensor,
    eps: float,
    prog: poplar.Sequence,
    unbiased_var_estimate: bool = False,
    stable_algo: bool = False,
    partials_type: Any = poplar.FLOAT,
    name: str = "",
) -> tuple[poplar.Tensor, poplar.Tensor]:
    """Mean and inverse standard deviation per channel, each ``[channels]`` (PopLibs'
    ``batchNormStatistics``); arguments as :func:`group_norm_statistics`."""
    return _statistics(
        graph, acts, eps, prog, 0, unbiased_var_estimate, stable_algo, partials_type, name,
        None, "batch_norm_statistics",
    )  # fmt: skip


def batch_norm_whiten(
    graph: poplar.Graph,
    acts: poplar.Tensor,
    mean: poplar.Tensor,
    inv_std_dev: poplar.Tensor,
    prog: poplar.Sequence,
    name: str = "",
) -> poplar.Tensor:
    """``(acts - mean) * inv_std_dev`` per channel (PopLibs' ``batchNormWhiten``)."""
    return _whiten(graph, acts, mean, inv_std_dev, prog, _BATCH, name, None, "batch_norm_whiten")


def batch_normalise(
    graph: poplar.Graph,
    acts: poplar.Tensor,
    gamma: poplar.Tensor,
    beta: poplar.Tensor,
    mean: poplar.Tensor,
    inv_std_dev: poplar.Tensor,
    prog: poplar.Sequence,
    name: str = "",
) -> tuple[poplar.Tensor, poplar.Tensor]:
    """``(gamma * whitened + beta, whitened)`` (PopLibs' ``batchNormalise``)."""
    return _normalise(
        graph, acts, gamma, beta, mean, inv_std_dev, prog, _BATCH, name, None, "batch_normalise"
    )


def batch_norm_param_gradients(
    graph: poplar.Graph,
    acts: poplar.Tensor,
    grads_in: poplar.Tensor,
    mean: poplar.Tensor | None,
    inv_std_dev: poplar.Tensor,
    prog: poplar.Sequence,
    partials_type: Any = poplar.FLOAT,
    name: str = "",
) -> tuple[poplar.Tensor, poplar.Tensor]:
    """``(gamma_delta, beta_delta)`` (PopLibs' ``batchNormParamGradients``)."""
    return _param_grads(
        graph, acts, grads_in, mean, inv_std_dev, prog, _BATCH, partials_type, name, None,
        "batch_norm_param_gradients",
    )  # fmt: skip


def batch_norm_gradients(
    graph: poplar.Graph,
    acts: poplar.Tensor,
    grads_in: poplar.Tensor,
    mean: poplar.Tensor | None,
    inv_std_dev: poplar.Tensor,
    gamma: poplar.Tensor,
    prog: poplar.Sequence,
    partials_type: Any = poplar.FLOAT,
    name: str = "",
) -> poplar.Tensor:
    """The gradient at the input of a batch norm in training mode (PopLibs'
    ``batchNormGradients``)."""
    return _grads(
        graph, acts, grads_in, mean, inv_std_dev, gamma, prog, _BATCH, partials_type, name,
        None, "batch_norm_gradients",
    )  # fmt: skip
