"""popnn: neural-network functions (PopLibs' ``popnn``) on the engine.

``from tremula.libs import popnn``; with a graph and a ``prog = poplar.Sequence()``::

    y = popnn.non_linearity(graph, popnn.NonLinearityType.GELU, x, prog)
    dx = popnn.non_linearity_input_gradient(graph, popnn.NonLinearityType.GELU, x, dy, prog)
    p = popnn.softmax(graph, logits, prog)
    loss, deltas = popnn.calc_loss(graph, p, labels, popnn.LossType.CROSS_ENTROPY_LOSS, prog)
    mean, inv_std = popnn.layer_norm_statistics(graph, x, 1e-5, prog)
    params = popnn.GruParams("float", batch, steps, input_size, output_size)
    weights = popnn.gru.create_weights(graph, params)
    out, inter = popnn.gru_fwd(graph, params, h0, inputs, weights, prog)
    dx, dh0, dw = popnn.gru_bwd(graph, params, prog, h0, inter, weights, inputs, out, dout)

See ``OVERVIEW.md`` for the codelets, the estimators and the deviations from PopLibs.

Every name is imported on first use (:mod:`tremula.lazy`): a model without recurrent layers
or normalisations does not load them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tremula.libs.popnn import gru, lstm, rnn
    from tremula.libs.popnn.codelets import CODELETS
    from tremula.libs.popnn.common import PopnnError
    from tremula.libs.popnn.gru import GruGradients, GruParams, GruWeights, gru_bwd, gru_fwd
    from tremula.libs.popnn.loss import (
        MASKED_LABEL_CODE,
        LossType,
        calc_loss,
        nll_loss,
        nll_loss_from_probs,
    )
    from tremula.libs.popnn.lstm import (
        LstmGradients,
        LstmParams,
        LstmState,
        LstmWeights,
        lstm_bwd,
        lstm_fwd,
    )
    from tremula.libs.popnn.nonlinearity import (
        non_linearity,
        non_linearity_in_place,
        non_linearity_input_gradient,
    )
    from tremula.libs.popnn.nonlinearity_table import NonLinearityType
    from tremula.libs.popnn.normalisation import (
        batch_norm_gradients,
        batch_norm_param_gradients,
        batch_norm_statistics,
        batch_norm_whiten,
        batch_normalise,
        group_norm_gradients,
        group_norm_param_gradients,
        group_norm_statistics,
        group_norm_whiten,
        group_normalise,
        layer_norm_gradients,
        layer_norm_param_gradients,
        layer_norm_statistics,
        layer_norm_whiten,
        layer_normalise,
    )
    from tremula.libs.popnn.rnn import create_initial_state, create_input
    from tremula.libs.popnn.softmax import (
        log_softmax,
        log_softmax_in_place,
        log_softmax_input_gradient,
        softmax,
        softmax_in_place,
        softmax_input_gradient,
    )
else:
    from tremula.lazy import attach

    # a name its own submodule shadows once loaded stays bound here, as eagerly
    from tremula.libs.popnn.softmax import softmax

    __getattr__, __dir__ = attach(__name__, __file__)

__all__ = [
    "CODELETS",
    "MASKED_LABEL_CODE",
    "GruGradients",
    "GruParams",
    "GruWeights",
    "LossType",
    "LstmGradients",
    "LstmParams",
    "LstmState",
    "LstmWeights",
    "NonLinearityType",
    "PopnnError",
    "batch_norm_gradients",
    "batch_norm_param_gradients",
    "batch_norm_statistics",
    "batch_norm_whiten",
    "batch_normalise",
    "calc_loss",
    "create_initial_state",
    "create_input",
    "group_norm_gradients",
    "group_norm_param_gradients",
    "group_norm_statistics",
    "group_norm_whiten",
    "group_normalise",
    "gru",
    "gru_bwd",
    "gru_fwd",
    "layer_norm_gradients",
    "layer_norm_param_gradients",
    "layer_norm_statistics",
    "layer_norm_whiten",
    "layer_normalise",
    "log_softmax",
    "log_softmax_in_place",
    "log_softmax_input_gradient",
    "lstm",
    "lstm_bwd",
    "lstm_fwd",
    "nll_loss",
    "nll_loss_from_probs",
    "non_linearity",
    "non_linearity_in_place",
    "non_linearity_input_gradient",
    "rnn",
    "softmax",
    "softmax_in_place",
    "softmax_input_gradient",
]
