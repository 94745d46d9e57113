"""What the recurrent layers share: parameters, weights, tensor creation and the time loop.

The time loop is a ``poplar.Repeat`` over ``time_steps`` of a body program built once: the
body dynamic-slices step ``t`` (an ``unsigned int`` step counter on tile 0, set before the
loop and incremented, or decremented for the backward pass, at the end of the body) from
the sequences and dynamic-updates the step's results into them. Sequences ``[T, B, N]`` are
created "sliceable": each column ``(b, n)`` keeps its ``T`` elements on one tile, the columns
spread linearly over the tiles, so a step's slice needs no exchange.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tremula import poplar
from tremula.libs.popnn.common import (
    FLOAT_TYPES,
    PopnnError,
    check_float,
    check_positive_int,
    check_shape,
)
from tremula.libs.popops.elementwise import map_in_place
from tremula.libs.popops.expr import _1
from tremula.libs.popops.slicing import dynamic_slice, dynamic_update


@dataclass(frozen=True)
class RnnParams:
    """Shape and type of a recurrent layer (PopLibs' ``GruParams`` / ``LstmParams`` with
    ``layerSizes = {input_size, output_size}``).

    Attributes:
        dtype: ``float`` or ``half`` (a poplar type or its name).
        batch_size, time_steps, input_size, output_size: positive integers.
        output_full_sequence: the forward pass returns ``[T, B, H]`` (True) or only the last
            output ``[B, H]`` (False; the backward pass then takes a ``[B, H]`` gradient).
    """

    dtype: Any
    batch_size: int
    time_steps: int
    input_size: int
    output_size: int
    output_full_sequence: bool = True

    def __post_init__(self) -> None:
        where = type(self).__name__
        try:
            dtype = poplar.as_type(self.dtype)
        except Exception:
            raise PopnnError(f"{where}: dtype {self.dtype!r} is not a poplar type") from None
        if dtype not in FLOAT_TYPES:
            raise PopnnError(f"{where}: dtype must be float or half, got {dtype}")
        object.__setattr__(self, "dtype", dtype)
        for f in ("batch_size", "time_steps", "input_size", "output_size"):
            object.__setattr__(self, f, check_positive_int(getattr(self, f), f, where))
        if not isinstance(self.output_full_sequence, bool):
            raise PopnnError(f"{where}: output_full_sequence must be a bool")

    @property
    def num_units(self) -> int:
        raise NotImplementedError


def check_params(params: Any, cls: type, where: str) -> Any:
    if not isinstance(params, cls):
        raise PopnnError(f"{where}: params must be a {cls.__name__}, got {type(params).__name__}")
    return params


def sequence_variable(
    graph: poplar.Graph, dtype: poplar.Type, shape: tuple[int, ...], name: str
) -> poplar.Tensor:
    """A ``[T, ...]`` variable mapped for slicing along dimension 0 (module docstring)."""
    t = graph.add_variable(dtype, shape, name)
    cols = int(np.prod(shape[1:], dtype=np.int64))
    poplar.map_tensor_linearly(graph, t.reshape([shape[0], cols]).transpose(), grain_size=shape[0])
    return t


def state_variable(
    graph: poplar.Graph, dtype: poplar.Type, shape: tuple[int, ...], name: str
) -> poplar.Tensor:
    t = graph.add_variable(dtype, shape, name)
    poplar.map_tensor_linearly(graph, t, grain_size=graph.target.vector_width(dtype.size))
    return t


def create_input(graph: poplar.Graph, params: RnnParams, name: str = "") -> poplar.Tensor:
    """An input sequence ``[time_steps, batch, input_size]`` mapped for slicing."""
    p = params
    shape = (p.time_steps, p.batch_size, p.input_size)
    return sequence_variable(graph, p.dtype, shape, name or "rnn/input")


def create_initial_state(graph: poplar.Graph, params: RnnParams, name: str = "") -> poplar.Tensor:
    """An initial output (or cell) state ``[batch, output_size]``, mapped linearly."""
    p = params
    return state_variable(graph, p.dtype, (p.batch_size, p.output_size), name or "rnn/initState")


def check_weights(
    graph: poplar.Graph, params: RnnParams, weights: Any, cls: type, where: str
) -> None:
    if not isinstance(weights, cls):
        raise PopnnError(f"{where}: weights must be a {cls.__name__}, got {type(weights).__name__}")
    k, i, h = params.num_units, params.input_size, params.output_size
    for what, shape in (
        ("input_weights", (k, i, h)),
        ("output_weights", (k, h, h)),
        ("biases", (k, h)),
    ):
        t = check_float(graph, getattr(weights, what), f"weights.{what}", where)
        check_shape(t, shape, params.dtype, f"weights.{what}", where)


def check_operand(
    graph: poplar.Graph, t: Any, shape: tuple[int, ...], dtype: poplar.Type, what: str, where: str
) -> poplar.Tensor:
    t = check_float(graph, t, what, where)
    check_shape(t, shape, dtype, what, where)
    return t


def stacked(w_in: poplar.Tensor, w_out: poplar.Tensor, units: slice) -> poplar.Tensor:
    """``[input_size + output_size, n * output_size]``: the units' input weights above
    their output weights, units side by side (the matmul of ``[x_t, h]``)."""
    a = w_in[units].dim_shuffle([1, 0, 2])
    b = w_out[units].dim_shuffle([1, 0, 2])
    cat = poplar.concat([a, b], 0)
    return cat.reshape([cat.shape[0], cat.shape[1] * cat.shape[2]])


def unstack(cat: poplar.Tensor, input_size: int, units: int) -> tuple[poplar.Tensor, ...]:
    """Inverse of :func:`stacked` for a ``[I + H, units * H]`` tensor: ``([units, I, H],
    [units, H, H])`` views."""
    rows, cols = cat.shape
    h = cols // units
    r = cat.reshape([rows, units, h]).dim_shuffle([1, 0, 2])
    return r[:, :input_size], r[:, input_size:]


class StepLoop:
    """A step counter and the body of a ``Repeat`` over the time steps."""

    def __init__(
        self, graph: poplar.Graph, steps: int, reverse: bool, prog: poplar.Sequence, name: str
    ) -> None:
        self.graph, self.steps, self.reverse, self.name = graph, steps, reverse, name
        self.index = graph.add_variable(poplar.UNSIGNED_INT, (1,), f"{name}/step")
        graph.set_tile_mapping(self.index, 0)
        start = graph.add_constant(poplar.UNSIGNED_INT, (1,), steps - 1 if reverse else 0)
        graph.set_tile_mapping(start, 0)
        prog.add(poplar.Copy(start, self.index))
        self.body = poplar.Sequence()
        self._outer = prog

    def slice(self, seq: poplar.Tensor, name: str) -> poplar.Tensor:
        """Step ``t`` of ``seq [T, ...]`` (a new tensor)."""
        return dynamic_slice(
            self.graph, seq, self.index, [0], [1], self.body, name=f"{self.name}/{name}"
        )[0]

    def update(self, seq: poplar.Tensor, value: poplar.Tensor, name: str) -> None:
        """Write ``value`` into step ``t`` of ``seq``."""
        dynamic_update(
            self.graph,
            seq,
            value.expand([0]),
            self.index,
            [0],
            [1],
            self.body,
            name=f"{self.name}/{name}",
        )

    def close(self) -> None:
        """Append the counter step and the ``Repeat`` to the outer program."""
        step = _1 - 1 if self.reverse else _1 + 1
        map_in_place(self.graph, step, [self.index], self.body, name=f"{self.name}/nextStep")
        self._outer.add(poplar.Repeat(self.steps, self.body, name=self.name))


def previous_steps(init: poplar.Tensor, seq: poplar.Tensor) -> poplar.Tensor:
    """``[init, seq[0], ..., seq[T-2]]``: the state entering each step (a view)."""
    return poplar.concat([init.expand([0]), seq[: seq.shape[0] - 1]], 0)
