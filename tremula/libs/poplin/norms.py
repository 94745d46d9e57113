"""Distributed normalisation statistics (PopLibs' ``poplin::distributedNormStatistics`` and
``poplin::distributedNormStatisticsGradients``): the statistics of a norm whose elements
are spread over several replicas, each holding a part of every statistic's elements.

Activations are ``[*, C, *]`` with the channels (one statistic each) on dimension 1; the
statistics reduce every other dimension. Each replica reduces its own part into float
partial sums scaled by ``1 / norm_size`` (``norm_size``: the elements behind one statistic
over all the replicas), and ``all_reduce`` (PopLibs' ``DistributedNormReduceCallback``:
``(graph, tensors, prog, group_size, name) -> tensors``) adds the replicas' partials, all
tensors in one call. So the mean is ``sum(x) / norm_size`` and the variance ``E[x^2] -
mean^2`` (clamped at 0; with ``stable_algo``, ``E[(x - mean)^2]`` after the mean is
reduced), times ``norm_size / (norm_size - 1)`` for an unbiased estimate; the inverse
standard deviation is ``1 / sqrt(var + eps)``. The statistics are returned in the
activations' type.

The gradient through the statistics, with ``xh`` the whitened activations and ``g`` the
gradient at the whitened output: ``dx = inv_std * (g - (sum(g) + xh * sum(g * xh)) /
norm_size)``, both sums over the replicas (one ``all_reduce`` call).

Cycles and memory are popops' (reductions, maps, casts) and the callback's (gcl's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tremula import poplar
from tremula.errors import GraphError
from tremula.libs.popops.cast import cast
from tremula.libs.popops.elementwise import map as pmap
from tremula.libs.popops.expr import Cast, Expr, Max, VarianceToInvStdDev, _1, _2, _3, _4, _5
from tremula.libs.popops.reduce import Operation, reduce_with_output

#: PopLibs' ``DistributedNormReduceCallback``
NormReduceCallback = Callable[
    [poplar.Graph, list[poplar.Tensor], poplar.Sequence, int, str], list[poplar.Tensor]
]


def _check(acts: poplar.Tensor, norm_size: int, where: str) -> tuple[int, ...]:
    if not isinstance(acts, poplar.Tensor) or acts.rank < 2:
        raise GraphError(f"{where}: acts must be a tensor of rank >= 2 (channels on dimension 1)")
    if acts.dtype not in (poplar.FLOAT, poplar.HALF):
        raise GraphError(f"{where}: acts must be float or half, got {acts.dtype}")
    if int(norm_size) != norm_size or norm_size <= 0:
        raise GraphError(f"{where}: norm_size must be a positive integer, got {norm_size!r}")
    return tuple(d for d in range(acts.rank) if d != 1)


def _partial(
    graph: poplar.Graph,
    t: poplar.Tensor,
    dims: tuple[int, ...],
    op: Operation,
    norm_size: int,
    prog: poplar.Sequence,
    name: str,
) -> poplar.Tensor:
    """``op`` of this replica's part over ``dims``, in float, divided by ``norm_size``."""
    out = graph.add_variable(poplar.FLOAT, (t.shape[1],), name)
    poplar.map_tensor_linearly(graph, out, grain_size=graph.target.vector_width(4))
    reduce_with_output(graph, t, out, dims, op, prog, scale=1.0 / norm_size, name=name)
    return out


def _per_channel(t: poplar.Tensor, acts: poplar.Tensor) -> poplar.Tensor:
    """A ``[C]`` tensor broadcast over ``acts``' shape (channels on dimension 1)."""
    shape = [1] * acts.rank
    shape[1] = acts.shape[1]
    return t.reshape(shape).broadcast_to(acts.shape)


def _reduced(
    graph: poplar.Graph,
    all_reduce: NormReduceCallback,
    parts: Sequence[poplar.Tensor],
    prog: poplar.Sequence,
    group_size: int,
    name: str,
) -> list[poplar.Tensor]:
    out = all_reduce(graph, list(parts), prog, group_size, name)
    if len(out) != len(parts):
        raise GraphError(
            f"{name}: the reduce callback returned {len(out)} tensors for {len(parts)}"
        )
    return out


def distributed_norm_statistics(
    graph: poplar.Graph,
    acts: poplar.Tensor,
    eps: float,
    prog: poplar.Sequence,
    unbiased_var_estimate: bool,
    all_reduce: NormReduceCallback,
    norm_size: int,
    stable_algo: bool = False,
    group_size: int = 1,
    name: str = "",
) -> tuple[poplar.Tensor, poplar.Tensor]:
    """(mean, inverse standard deviation) per channel, ``[C]``, of ``acts``' type (module
    docstring). ``group_size`` is passed to ``all_reduce`` as PopLibs passes it.

    Raises:
        GraphError: ``acts`` not float / half of rank >= 2, ``norm_size`` not positive.
    """
    where = f"distributed_norm_statistics{f' {name!r}' if name else ''}"
    dims = _check(acts, norm_size, where)
    name = name or "distributedNormStatistics"
    mean = _partial(graph, acts, dims, Operation.ADD, norm_size, prog, f"{name}/mean")
    k = norm_size / (norm_size - 1) if unbiased_var_estimate and norm_size > 1 else 1.0
    if stable_algo:
        (mean,) = _reduced(graph, all_reduce, [mean], prog, group_size, f"{name}/allReduceMean")
        centred = pmap(
            graph,
            _float(_1, acts) - _2,
            [acts, _per_channel(mean, acts)],
            prog,
            name=f"{name}/centre",
        )
        power = _partial(graph, centred, dims, Operation.SQUARE_ADD, norm_size, prog, f"{name}/var")
        (var,) = _reduced(graph, all_reduce, [power], prog, group_size, f"{name}/allReduceVar")
        inv = pmap(graph, VarianceToInvStdDev(_1 * k, eps), [var], prog, name=f"{name}/invStdDev")
    else:
        power = _partial(graph, acts, dims, Operation.SQUARE_ADD, norm_size, prog, f"{name}/power")
        mean, power = _reduced(
            graph, all_reduce, [mean, power], prog, group_size, f"{name}/allReduce"
        )
        expr = VarianceToInvStdDev(Max(_2 - _1 * _1, 0.0) * k, eps)
        inv = pmap(graph, expr, [mean, power], prog, name=f"{name}/invStdDev")
    if acts.dtype is not poplar.FLOAT:
        mean = cast(graph, mean, acts.dtype, prog, name=f"{name}/castMean")
        inv = cast(graph, inv, acts.dtype, prog, name=f"{name}/castInvStdDev")
    return mean, inv


def distributed_norm_statistics_gradients(
    graph: poplar.Graph,
    acts_whitened: poplar.Tensor,
    grads_in: poplar.Tensor,
    inv_std_dev: poplar.Tensor,
    prog: poplar.Sequence,
    all_reduce: NormReduceCallback,
    norm_size: int,
    group_size: int = 1,
    name: str = "",
) -> poplar.Tensor:
    """The gradient at the input of the statistics (module docstring), shaped and typed
    like ``grads_in``.

    Raises:
        GraphError: operands of different shapes, bad types or ``norm_size``.
    """
    where = f"distributed_norm_statistics_gradients{f' {name!r}' if name else ''}"
    dims = _check(acts_whitened, norm_size, where)
    if grads_in.shape != acts_whitened.shape:
        raise GraphError(
            f"{where}: grads_in {grads_in.shape} must have the shape of acts_whitened "
            f"{acts_whitened.shape}"
        )
    if inv_std_dev.num_elements != acts_whitened.shape[1]:
        raise GraphError(
            f"{where}: inv_std_dev has {inv_std_dev.num_elements} elements, expected one per "
            f"channel ({acts_whitened.shape[1]})"
        )
    name = name or "distributedNormStatisticsGradients"
    gx = pmap(graph, _1 * _2, [grads_in, acts_whitened], prog, name=f"{name}/gradsXWhitened")
    mean_g = _partial(graph, grads_in, dims, Operation.ADD, norm_size, prog, f"{name}/meanDelta")
    mean_gx = _partial(graph, gx, dims, Operation.ADD, norm_size, prog, f"{name}/varDelta")
    mean_g, mean_gx = _reduced(
        graph, all_reduce, [mean_g, mean_gx], prog, group_size, f"{name}/allReduce"
    )
    ins = [grads_in, acts_whitened, _per_channel(inv_std_dev.flatten(), acts_whitened)]
    ins += [_per_channel(mean_g, acts_whitened), _per_channel(mean_gx, acts_whitened)]
    g, xh, inv = (_float(e, t) for e, t in zip((_1, _2, _3), ins))
    expr = inv * (g - _4 - xh * _5)  # in float, the partials' type
    if grads_in.dtype is not poplar.FLOAT:
        expr = Cast(expr, grads_in.dtype)
    return pmap(graph, expr, ins, prog, name=f"{name}/inGrad")


def _float(e: Expr, t: poplar.Tensor) -> Expr:
    return e if t.dtype is poplar.FLOAT else Cast(e, poplar.FLOAT)
