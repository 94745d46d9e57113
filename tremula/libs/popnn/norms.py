"""Normalisation: group norm, layer norm and batch norm (PopLibs' ``popnn::gn``,
``popnn::ln`` and ``popnn::bn``), composed from popops' reductions and maps.

Activations are ``[batch, channels, *field]`` (rank >= 2; a matrix is ``[batch,
channels]``). Statistics:

* group norm: per (sample, group), over the group's channels and the field; returned
  flattened ``[batch * groups]`` (index ``b * groups + g``). By default (PopLibs' option
  ``groupNormStridedChannelGrouping = true``) group ``g`` holds channels ``g, g + G,
  g + 2G ...``; the option ``false`` takes consecutive channels (PyTorch's grouping).
* layer norm: group norm with one group: per sample over all non-batch dimensions, ``[batch]``.
* batch norm: per channel over the batch and the field, ``[channels]``.

``gamma`` and ``beta`` are per channel ``[channels]`` in all three. The statistics are the
mean and the inverse standard deviation ``1 / sqrt(var + eps)`` (eps inside the root, as
PopLibs' ``VARIANCE_TO_INV_STD_DEV``); the variance is ``E[x^2] - mean^2`` (clamped at 0),
or ``E[(x - mean)^2]`` with ``stable_algo``, times ``n / (n - 1)`` with
``unbiased_var_estimate``. Reductions accumulate in float (``partials_type``); results
have the activations' type.

Gradients, with ``xh`` the whitened activations and ``g = grads_in * gamma``:
``dx = inv_std * (g - mean(g) - xh * mean(g * xh))`` (means over each statistic's
elements); ``gamma_delta = sum(grads_in * xh)``, ``beta_delta = sum(grads_in)`` over all
but the channel dimension. Functions taking ``mean`` accept ``mean=None`` to mean that
``acts`` are already whitened (PopLibs' ``actsWhitened`` overloads).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tremula import poplar
from tremula.libs.popnn.common import (
    PopnnError,
    check_float,
    check_like,
    check_number,
    check_positive_int,
    check_shape,
)
from tremula.libs.popops.cast import cast
from tremula.libs.popops.elementwise import map as pmap
from tremula.libs.popops.expr import Max, VarianceToInvStdDev, _1, _2, _3, _4, _5
from tremula.libs.popops.reduce import Operation, reduce, reduce_with_output

_OPTIONS = ("groupNormStridedChannelGrouping",)


@dataclass(frozen=True)
class Norm:
    """How one normalisation groups ``acts`` viewed as ``[B, C, F]``: ``groups`` > 0 for
    group norm (statistics ``[B, G]``), 0 for batch norm (statistics ``[C]``)."""

    shape: tuple[int, int, int]
    groups: int
    strided: bool = True

    @property
    def stats_shape(self) -> tuple[int, ...]:
        b, c, _ = self.shape
        return (b, self.groups) if self.groups else (c,)

    @property
    def num_stats(self) -> int:
        return int(np.prod(self.stats_shape))

    @property
    def count(self) -> int:
        """Elements behind each statistic."""
        b, c, f = self.shape
        return (c // self.groups) * f if self.groups else b * f

    def view(self, t3: poplar.Tensor) -> tuple[poplar.Tensor, tuple[int, ...]]:
        """``t3 [B, C, F]`` as a view whose ``dims`` reduce to the statistics' shape."""
        b, c, f = self.shape
        if not self.groups:
            return t3, (0, 2)
        g = self.groups
        if self.strided:
            return t3.reshape([b, c // g, g, f]), (1, 3)
        return t3.reshape([b, g, c // g, f]), (2, 3)

    def spread(self, stats: poplar.Tensor) -> poplar.Tensor:
        """Flat statistics as a tensor broadcastable to ``[B, C, F]``."""
        b, c, f = self.shape
        if not self.groups:
            return stats.reshape([1, c, 1])
        g = self.groups
        if self.strided:
            full = stats.reshape([b, 1, g, 1]).broadcast_to([b, c // g, g, f])
        else:
            full = stats.reshape([b, g, 1, 1]).broadcast_to([b, g, c // g, f])
        return full.reshape([b, c, f])


def _as3(t: poplar.Tensor) -> poplar.Tensor:
    f = int(np.prod(t.shape[2:], dtype=np.int64)) if t.rank > 2 else 1
    return t.reshape([t.shape[0], t.shape[1], f])


def make_norm(
    acts: poplar.Tensor, groups: int, options: Mapping[str, Any] | None, where: str
) -> Norm:
    """The :class:`Norm` of ``acts`` (checked) for ``groups`` groups (0: batch norm)."""
    if acts.rank < 2 or acts.num_elements == 0:
        raise PopnnError(
            f"{where}: acts must be [batch, channels, ...] with no zero dimension, got "
            f"shape {acts.shape}"
        )
    opts = dict(options or {})
    unknown = sorted(set(opts) - set(_OPTIONS))
    if unknown:
        raise PopnnError(f"{where}: unknown option(s) {unknown}; known: {list(_OPTIONS)}")
    strided = opts.get("groupNormStridedChannelGrouping", True)
    if isinstance(strided, str) and strided.lower() in ("true", "false"):
        strided = strided.lower() == "true"
    if not isinstance(strided, bool):
        raise PopnnError(f"{where}: option groupNormStridedChannelGrouping must be a bool")
    c = acts.shape[1]
    if groups and c % groups:
        raise PopnnError(
            f"{where}: num_groups {groups} does not divide the {c} channels of acts {acts.shape}"
        )
    return Norm(tuple(_as3(acts).shape), groups, strided)  # type: ignore[arg-type]


def _stat_var(graph: poplar.Graph, norm: Norm, dtype: poplar.Type, name: str) -> poplar.Tensor:
    t = graph.add_variable(dtype, norm.stats_shape, name)
    poplar.map_tensor_linearly(graph, t, grain_size=graph.target.vector_width(dtype.size))
    return t


def _mean_of(
    graph: poplar.Graph,
    norm: Norm,
    t3: poplar.Tensor,
    op: Operation,
    dtype: poplar.Type,
    prog: poplar.Sequence,
    name: str,
) -> poplar.Tensor:
    """``op`` over each statistic's elements of ``t3``, divided by their count; flat."""
    out = _stat_var(graph, norm, dtype, name)
    view, dims = norm.view(t3)
    reduce_with_output(graph, view, out, dims, op, prog, scale=1.0 / norm.count, name=name)
    return out.flatten()


def statistics(
    graph: poplar.Graph,
    norm: Norm,
    acts: poplar.Tensor,
    eps: float,
    prog: poplar.Sequence,
    unbiased: bool,
    stable: bool,
    name: str,
) -> tuple[poplar.Tensor, poplar.Tensor]:
    """(mean, inverse standard deviation), flat, of ``acts``' type. The mean is accumulated
    in float and given ``acts``' type before the stable algorithm centres ``acts`` with it
    (PopLibs' mean has the activations' type); the power and the variance stay float."""
    a3 = _as3(acts)
    mean = _mean_of(graph, norm, a3, Operation.ADD, poplar.FLOAT, prog, f"{name}/mean")
    half = acts.dtype is not poplar.FLOAT
    k = norm.count / (norm.count - 1) if unbiased and norm.count > 1 else 1.0
    if stable:
        if half:
            mean = cast(graph, mean, acts.dtype, prog, name=f"{name}/castMean")
        centred = pmap(graph, _1 - _2, [a3, norm.spread(mean)], prog, name=f"{name}/centre")
        var = _mean_of(
            graph, norm, centred, Operation.SQUARE_ADD, poplar.FLOAT, prog, f"{name}/var"
        )
        expr = VarianceToInvStdDev(_1 * k, eps)
        inv = pmap(graph, expr, [var], prog, name=f"{name}/invStdDev")
    else:
        power = _mean_of(graph, norm, a3, Operation.SQUARE_ADD, poplar.FLOAT, prog, f"{name}/power")
        expr = VarianceToInvStdDev(Max(_2 - _1 * _1, 0.0) * k, eps)
        inv = pmap(graph, expr, [mean, power], prog, name=f"{name}/invStdDev")
    if half:
        if not stable:
            mean = cast(graph, mean, acts.dtype, prog, name=f"{name}/castMean")
        inv = cast(graph, inv, acts.dtype, prog, name=f"{name}/castInvStdDev")
    return mean, inv


def whiten(
    graph: poplar.Graph,
    norm: Norm,
    acts: poplar.Tensor,
    mean: poplar.Tensor,
    inv_std: poplar.Tensor,
    prog: poplar.Sequence,
    name: str,
) -> poplar.Tensor:
    """``(acts - mean) * inv_std`` shaped like ``acts``."""
    ins = [_as3(acts), norm.spread(mean), norm.spread(inv_std)]
    return pmap(graph, (_1 - _2) * _3, ins, prog, name=f"{name}/whiten").reshape(acts.shape)


def normalise(
    graph: poplar.Graph,
    norm: Norm,
    acts: poplar.Tensor,
    gamma: poplar.Tensor,
    beta: poplar.Tensor,
    mean: poplar.Tensor,
    inv_std: poplar.Tensor,
    prog: poplar.Sequence,
    name: str,
) -> tuple[poplar.Tensor, poplar.Tensor]:
    """``(gamma * whitened + beta, whitened)``, both shaped like ``acts``."""
    white = whiten(graph, norm, acts, mean, inv_std, prog, name)
    c = norm.shape[1]
    ins = [_as3(white), gamma.reshape([1, c, 1]), beta.reshape([1, c, 1])]
    out = pmap(graph, _1 * _2 + _3, ins, prog, name=f"{name}/scaleShift")
    return out.reshape(acts.shape), white


def _whitened(graph, norm, acts, mean, inv_std, prog, name) -> poplar.Tensor:
    if mean is None:
        return _as3(acts)
    return _as3(whiten(graph, norm, acts, mean, inv_std, prog, name))


def gradients(
    graph: poplar.Graph,
    norm: Norm,
    acts: poplar.Tensor,
    grads_in: poplar.Tensor,
    mean: poplar.Tensor | None,
    inv_std: poplar.Tensor,
    gamma: poplar.Tensor,
    prog: poplar.Sequence,
    name: str,
) -> poplar.Tensor:
    """The input gradient (module docstring), shaped like ``acts``."""
    xh = _whitened(graph, norm, acts, mean, inv_std, prog, name)
    c, dt = norm.shape[1], acts.dtype
    g = pmap(graph, _1 * _2, [_as3(grads_in), gamma.reshape([1, c, 1])], prog, name=f"{name}/g")
    gx = pmap(graph, _1 * _2, [g, xh], prog, name=f"{name}/gx")
    mg = _mean_of(graph, norm, g, Operation.ADD, dt, prog, f"{name}/meanG")
    mgx = _mean_of(graph, norm, gx, Operation.ADD, dt, prog, f"{name}/meanGX")
    ins = [g, xh, norm.spread(inv_std), norm.spread(mg), norm.spread(mgx)]
    dx = pmap(graph, _3 * (_1 - _4 - _2 * _5), ins, prog, name=f"{name}/inGrad")
    return dx.reshape(acts.shape)


def param_gradients(
    graph: poplar.Graph,
    norm: Norm,
    acts: poplar.Tensor,
    grads_in: poplar.Tensor,
    mean: poplar.Tensor | None,
    inv_std: poplar.Tensor,
    prog: poplar.Sequence,
    name: str,
) -> tuple[poplar.Tensor, poplar.Tensor]:
    """``(gamma_delta [C], beta_delta [C])``."""
    xh = _whitened(graph, norm, acts, mean, inv_std, prog, name)
    g3 = _as3(grads_in)
    prod = pmap(graph, _1 * _2, [g3, xh], prog, name=f"{name}/gradsXWhitened")
    gamma_delta = reduce(graph, prod, [0, 2], Operation.ADD, prog, name=f"{name}/gammaDelta")
    beta_delta = reduce(graph, g3, [0, 2], Operation.ADD, prog, name=f"{name}/betaDelta")
    return gamma_delta, beta_delta


# ---- argument checks shared by the public functions ----


def check_acts(graph: poplar.Graph, acts: Any, where: str) -> poplar.Tensor:
    return check_float(graph, acts, "acts", where, min_rank=2)


def check_eps(eps: Any, where: str) -> float:
    eps = check_number(eps, "eps", where)
    if eps < 0:
        raise PopnnError(f"{where}: eps must be >= 0, got {eps}")
    return eps


def check_groups(groups: Any, where: str) -> int:
    return check_positive_int(groups, "num_groups", where)


def check_partials(partials_type: Any, where: str) -> None:
    if poplar.as_type(partials_type) is not poplar.FLOAT:
        raise PopnnError(
            f"{where}: partials_type must be float (reductions accumulate in float), got "
            f"{partials_type}"
        )


def check_stats(
    graph: poplar.Graph, norm: Norm, acts: poplar.Tensor, stats: dict[str, Any], where: str
) -> dict[str, poplar.Tensor | None]:
    """Checked statistics (``mean`` may be None) of ``acts``' type and ``num_stats``."""
    out: dict[str, poplar.Tensor | None] = {}
    for what, t in stats.items():
        if t is None and what == "mean":
            out[what] = None
            continue
        t = check_float(graph, t, what, where)
        check_shape(t, (norm.num_stats,), acts.dtype, what, where)
        out[what] = t
    return out


def check_channels(
    graph: poplar.Graph, norm: Norm, acts: poplar.Tensor, params: dict[str, Any], where: str
) -> None:
    for what, t in params.items():
        t = check_float(graph, t, what, where)
        check_shape(t, (norm.shape[1],), acts.dtype, what, where)


def check_grads(graph: poplar.Graph, acts: poplar.Tensor, grads_in: Any, where: str):
    grads_in = check_float(graph, grads_in, "grads_in", where)
    check_like(grads_in, acts, "grads_in", "acts", where)
    return grads_in
