"""``tremula train``: a 64-256-256-10 MLP trained with PopXL autodiff on scikit-learn's
bundled digits (no download), on the Mk2 IPU Model; prints the loss, the test accuracy and
the profile summary.

The program is plain PopXL (``import popxl``): a ``Module`` traced into a forward graph,
``transforms.autodiff`` for the backward graph, ``call_with_info`` / ``inputs_dict`` to
connect them, ``nll_loss_with_softmax_grad`` for the loss and ``scaled_add_`` for SGD.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

import popxl
import popxl.ops as ops
from tremula.progress import track

SIZES = (64, 256, 256, 10)


class MLP(popxl.Module):
    """Dense layers with ReLU between them; weights are graph inputs (``self.params``)."""

    def __init__(self, sizes: tuple[int, ...] = SIZES) -> None:
        self.sizes = sizes
        self.params: list[popxl.Tensor] = []

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        self.params = []
        for i, (n_in, n_out) in enumerate(itertools.pairwise(self.sizes)):
            w = popxl.graph_input((n_in, n_out), popxl.float32, f"W{i}")
            b = popxl.graph_input((n_out,), popxl.float32, f"b{i}")
            self.params += [w, b]
            x = x @ w + b
            if i < len(self.sizes) - 2:
                x = ops.relu(x)
        return x


def init_params(seed: int = 0, sizes: tuple[int, ...] = SIZES) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for n_in, n_out in itertools.pairwise(sizes):
        out.append((rng.standard_normal((n_in, n_out)) * np.sqrt(2.0 / n_in)).astype(np.float32))
        out.append(np.zeros(n_out, np.float32))
    return out


@dataclass
class Trainer:
    session: popxl.Session
    x: popxl.HostToDeviceStream
    labels: popxl.HostToDeviceStream
    loss: popxl.DeviceToHostStream
    variables: list[popxl.Variable]


def build_training(batch: int, lr: float, device: str = "ipu_model", seed: int = 0) -> Trainer:
    """One SGD step per ``session.run``: forward, loss, backward, update."""
    ir = popxl.Ir()
    main = ir.main_graph
    with main:
        x_stream = popxl.h2d_stream((batch, SIZES[0]), popxl.float32, name="x")
        y_stream = popxl.h2d_stream((batch,), popxl.int32, name="labels")
        variables = [popxl.variable(p, name=f"p{i}") for i, p in enumerate(init_params(seed))]
        mlp = MLP()
        fwd = ir.create_graph(mlp, x_stream.spec)
        bwd = popxl.transforms.autodiff(fwd, grads_required=mlp.params)

        x = ops.host_load(x_stream, "x")
        labels = ops.host_load(y_stream, "labels")
        fwd_info = ops.call_with_info(fwd, x, inputs_dict=dict(zip(mlp.params, variables)))
        logits = fwd_info.parent_output(0)
        loss, dlogits = ops.nll_loss_with_softmax_grad(ops.softmax(logits, axis=-1), labels)
        grads = ops.call(bwd.graph, dlogits, inputs_dict=bwd.inputs_dict(fwd_info))
        for var, grad in zip(variables, grads):
            ops.scaled_add_(var, grad, b=-lr)
        loss_stream = popxl.d2h_stream(loss.shape, loss.dtype, name="loss")
        ops.host_store(loss_stream, loss)
    return Trainer(popxl.Session(ir, device), x_stream, y_stream, loss_stream, variables)


def predict(weights: list[np.ndarray], data: np.ndarray, device: str = "ipu_model") -> np.ndarray:
    """Class predictions of the MLP with ``weights`` on the device (inference graph)."""
    ir = popxl.Ir()
    with ir.main_graph:
        stream = popxl.h2d_stream(data.shape, popxl.float32, name="x")
        params = [popxl.constant(w, name=f"p{i}") for i, w in enumerate(weights)]
        mlp = MLP()
        graph = ir.create_graph(mlp, stream.spec)
        (logits,) = ops.call(
            graph, ops.host_load(stream), inputs_dict=dict(zip(mlp.params, params))
        )
        out = popxl.d2h_stream(logits.shape, logits.dtype, name="logits")
        ops.host_store(out, logits)
    with popxl.Session(ir, device) as session:
        return session.run({stream: data})[out].argmax(axis=-1)


def load_digits(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's bundled 8x8 digits, scaled to [0, 1], split 80 / 20."""
    try:
        from sklearn.datasets import load_digits as sk_load
    except ImportError as err:  # pragma: no cover - the extra is missing
        raise SystemExit(
            "the digits example needs scikit-learn: pip install -e '.[examples]'"
        ) from err
    d = sk_load()
    x, y = (d.data / 16.0).astype(np.float32), d.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(y))
    x, y = x[order], y[order]
    cut = int(0.8 * len(y))
    return x[:cut], y[:cut], x[cut:], y[cut:]


def train(
    epochs: int = 8, batch: int = 32, lr: float = 0.05, device: str = "ipu_model", log: bool = True
) -> tuple[float, list[float], Trainer]:
    """Train and return (test accuracy, loss per epoch, trainer)."""
    x_train, y_train, x_test, y_test = load_digits()
    trainer = build_training(batch, lr, device)
    losses = []
    steps = len(y_train) // batch
    with trainer.session as session:
        for epoch in range(epochs):
            total = 0.0
            for s in track(range(steps), f"epoch {epoch + 1}/{epochs}"):
                sl = slice(s * batch, (s + 1) * batch)
                out = session.run({trainer.x: x_train[sl], trainer.labels: y_train[sl]})
                total += float(out[trainer.loss])
            losses.append(total / steps)
            if log:
                print(f"epoch {epoch + 1}: loss {losses[-1]:.4f}")
    weights = [np.asarray(trainer.session.get_tensor_data(v)) for v in trainer.variables]
    accuracy = float(np.mean(predict(weights, x_test, device) == y_test))
    return accuracy, losses, trainer


def main(epochs: int = 8, device: str = "ipu_model", summary: bool = True) -> int:
    accuracy, _, trainer = train(epochs, device=device)
    print(f"test accuracy: {accuracy:.3f} ({'OK' if accuracy >= 0.9 else 'below 0.9'})")
    if summary:
        engine = trainer.session.engine
        engine.reset_execution_profile()
        x_train, y_train, _, _ = load_digits()
        with trainer.session as session:  # one more step, profiled on its own
            session.run({trainer.x: x_train[:32], trainer.labels: y_train[:32]})
        print()
        engine.print_profile_summary()
    return 0 if accuracy >= 0.9 else 1
