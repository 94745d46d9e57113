"""RigL on the digits: a 64-256-256-10 MLP whose three weight matrices are PopSparse dynamic
sparse layers at density 0.1, trained with PopXL autodiff, its sparsity pattern rewired every
few steps without recompiling.

RigL (Evci et al. 2020, "Rigging the Lottery"): every ``DELTA_T`` steps until 75% of
training, each layer drops the ``k = f(t) nnz`` active weights of smallest magnitude and
grows the ``k`` inactive ones of largest dense gradient, which start at zero;
``f(t) = alpha / 2 (1 + cos(pi t / T_end))``. The number of non-zeros stays the same, so the
bucket sizes the program was compiled for still fit: a new pattern is new host data for the
``meta_info`` and ``nz_values`` variables, written to the same Session.

The dense gradient ``dW = dY^T X`` of a layer needs its input ``X`` and its output gradient
``dY``. The training step keeps the last ones in variables (the forward graph returns the
layer inputs, autodiff gives the output gradients); the host multiplies them at update
steps only. The trained pattern is then read back (``sparsity_data_impl_to_coo_matrix``),
partitioned again for a layer of the test set's batch size and evaluated on the device, next
to the dense model of ``tremula train``.

These layers are tiny for a 1472-tile IPU: each bucket holds a few non-zeros, and RigL
gathers the pattern onto the inputs and units that matter. The buckets are sized for three
times the uniform occupancy (``metaInfoBucketOversizeProportion`` 2.0) so that a skewed
pattern still fits near home instead of spilling to far tiles, which would lengthen the
propagation loop the device runs (and the IPU Model simulates) at every pass.
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np

import popxl
import popxl.ops as ops
from tremula import digits
from tremula.libs.popsparse import COOMatrix, dynamic
from tremula.progress import track

DEVICE = "ipu_model"
SIZES = digits.SIZES  # 64-256-256-10
DENSITY = 0.1
EPOCHS, BATCH, LR = 8, 32, 0.1  # a sparse net takes a larger step than the dense one's 0.05
DELTA_T, ALPHA, END = 20, 0.3, 0.75  # RigL: update every 20 steps, f(0) = 0.3, stop at 75%
OPTIONS = {"doGradAPass": True, "doGradWPass": True, "metaInfoBucketOversizeProportion": 2.0}
# (the options of the layer: the partitioner and the op get the same)


# ---- the host side of a layer: pattern <-> buckets ----


class Layer:
    """One sparse layer's parameters and partitioner (for ``batch`` rows of input)."""

    def __init__(self, n_in: int, n_out: int, batch: int) -> None:
        element = dynamic.SparsityParams()
        self.params = dynamic.FullyConnectedParams.create_with_nz_ratio(
            element, DENSITY, batch, 1, n_in, n_out
        )
        self.part = ops.sparse.partitioner(self.params, OPTIONS, DEVICE)
        self.nnz = self.params.get_num_non_zero_values()
        self.shape = (n_out, n_in)

    def encode(self, coo: COOMatrix) -> dynamic.SparsityDataImpl:
        return self.part.create_sparsity_data_impl(coo)

    def decode(self, meta_info: np.ndarray, nz_values: np.ndarray) -> COOMatrix:
        return self.part.sparsity_data_impl_to_coo_matrix(
            dynamic.SparsityDataImpl(meta_info, nz_values)
        )


def initial_pattern(layer: Layer, rng: np.random.Generator) -> COOMatrix:
    """``nnz`` random positions, He-initialised for the fan-in they give."""
    n_out, n_in = layer.shape
    flat = rng.choice(n_out * n_in, layer.nnz, replace=False)
    rows, cols = np.divmod(flat, n_in)
    scale = math.sqrt(2.0 / (DENSITY * n_in))
    values = (rng.standard_normal(layer.nnz) * scale).astype(np.float32)
    return COOMatrix(values, rows, cols, (1, 1), n_out, n_in)


def rigl(coo: COOMatrix, dense_grad: np.ndarray, fraction: float) -> COOMatrix:
    """Drop the ``fraction`` of active weights of smallest magnitude; grow as many inactive
    positions of largest ``|dense_grad|``, at zero."""
    n_out, n_in = dense_grad.shape
    flat = coo.row_indices * n_in + coo.column_indices
    k = int(fraction * flat.size)
    if k == 0:
        return coo
    order = np.argsort(np.abs(coo.nz_values), kind="stable")
    keep = order[k:]
    score = np.abs(dense_grad).ravel().astype(np.float64)
    score[flat[keep]] = -1.0  # still active: not a candidate (a dropped one may come back)
    grow = np.argsort(-score, kind="stable")[:k]
    flat = np.concatenate([flat[keep], grow])
    values = np.concatenate([coo.nz_values[keep], np.zeros(k, np.float32)])
    rows, cols = np.divmod(flat, n_in)
    return COOMatrix(values, rows, cols, (1, 1), n_out, n_in)


# ---- the device program ----


class SparseMLP(popxl.Module):
    """Sparse layers with bias and ReLU between them; returns the logits, then each layer's
    input (the last ones, for the dense gradient). ``self.params``: per layer ``meta_info``,
    ``nz_values``, ``bias`` graph inputs; ``self.pre``: each layer's sparse product."""

    def __init__(self, layers: list[Layer]) -> None:
        self.layers = layers
        self.params: list[popxl.Tensor] = []
        self.pre: list[popxl.Tensor] = []

    def build(self, x: popxl.Tensor) -> tuple[popxl.Tensor, ...]:
        self.params, self.pre, inputs = [], [], []
        for i, layer in enumerate(self.layers):
            meta = popxl.graph_input((layer.part.plan.meta_info_elems,), popxl.uint16, f"m{i}")
            nz = popxl.graph_input((layer.part.plan.nz_elems,), popxl.float32, f"nz{i}")
            bias = popxl.graph_input((layer.shape[0],), popxl.float32, f"b{i}")
            self.params += [meta, nz, bias]
            inputs.append(x)
            y = ops.sparse.fully_connected(x, meta, nz, layer.params, OPTIONS, DEVICE)
            self.pre.append(y)
            x = y + bias
            if i < len(self.layers) - 1:
                x = ops.relu(x)
        return (x, *inputs)


class Trainer:
    """One SGD step per run. Variables: each layer's ``(meta_info, nz_values, bias)``, and
    the layer inputs and output gradients of the last step (for RigL's dense gradient)."""

    def __init__(self, layers: list[Layer], patterns: list[COOMatrix]) -> None:
        self.layers = layers
        ir = popxl.Ir()
        with ir.main_graph:
            self.x = popxl.h2d_stream((BATCH, SIZES[0]), popxl.float32, name="x")
            self.labels = popxl.h2d_stream((BATCH,), popxl.int32, name="labels")
            self.weights = [self._weights(i, layer, coo) for i, (layer, coo) in
                            enumerate(zip(layers, patterns))]  # fmt: skip
            self.inputs = [self._zeros((BATCH, n), f"x{i}") for i, n in enumerate(SIZES[:-1])]
            self.grads = [self._zeros((BATCH, n), f"dy{i}") for i, n in enumerate(SIZES[1:])]
            mlp = SparseMLP(layers)
            fwd = ir.create_graph(mlp, self.x.spec)
            trained = [p for p in mlp.params if p.dtype == popxl.float32]  # nz_values, bias
            bwd = popxl.transforms.autodiff(fwd, fwd.outputs[:1], trained + mlp.pre)
            variables = [v for w in self.weights for v in w]
            info = ops.call_with_info(
                fwd, ops.host_load(self.x, "x"), inputs_dict=dict(zip(mlp.params, variables))
            )
            logits, *inputs = (info.parent_output(i) for i in range(len(SIZES)))
            probs = ops.softmax(logits, axis=-1)
            loss, dlogits = ops.nll_loss_with_softmax_grad(probs, ops.host_load(self.labels))
            grads = ops.call(bwd.graph, dlogits, inputs_dict=bwd.inputs_dict(info))
            for var, grad in zip([v for v in variables if v.dtype == popxl.float32], grads):
                ops.scaled_add_(var, grad, b=-LR)
            for keep, value in zip(self.inputs + self.grads, [*inputs, *grads[len(trained) :]]):
                ops.var_updates.copy_var_update_(keep, value)
            self.loss = popxl.d2h_stream(loss.shape, loss.dtype, name="loss")
            ops.host_store(self.loss, loss)
        self.session = popxl.Session(ir, DEVICE)

    @staticmethod
    def _weights(i: int, layer: Layer, coo: COOMatrix) -> tuple[popxl.Variable, ...]:
        impl = layer.encode(coo)
        return (
            popxl.variable(impl.meta_info, popxl.uint16, name=f"meta_info{i}"),
            popxl.variable(impl.nz_values, popxl.float32, name=f"nz_values{i}"),
            popxl.variable(np.zeros(layer.shape[0], np.float32), name=f"bias{i}"),
        )

    @staticmethod
    def _zeros(shape: tuple[int, int], name: str) -> popxl.Variable:
        return popxl.variable(np.zeros(shape, np.float32), name=name)

    def step(self, x: np.ndarray, labels: np.ndarray) -> float:
        return float(self.session.run({self.x: x, self.labels: labels})[self.loss])

    def patterns(self) -> list[COOMatrix]:
        """Each layer's weights read back from the device as COO."""
        data = self.session.get_tensors_data([v for w in self.weights for v in w[:2]])
        return [
            layer.decode(data[m], data[nz]) for layer, (m, nz, _) in zip(self.layers, self.weights)
        ]

    def biases(self) -> list[np.ndarray]:
        return [self.session.get_tensor_data(w[2]) for w in self.weights]

    def dense_grads(self) -> list[np.ndarray]:
        """``dW = dY^T X`` of each layer at the last step."""
        data = self.session.get_tensors_data(self.inputs + self.grads)
        return [data[g].T @ data[x] for x, g in zip(self.inputs, self.grads)]

    def load(self, patterns: list[COOMatrix]) -> None:
        """Write new patterns into the same variables (no recompilation)."""
        values = {}
        for layer, (meta, nz, _), coo in zip(self.layers, self.weights, patterns):
            impl = layer.encode(coo)
            values[meta], values[nz] = impl.meta_info, impl.nz_values
        self.session.write_variables_data(values)


def evaluate(patterns: list[COOMatrix], biases: list[np.ndarray], x: np.ndarray) -> np.ndarray:
    """Class predictions of the sparse MLP for all of ``x`` in one batch: the patterns
    partitioned again for layers of that batch size, run on the device."""
    layers = [Layer(a, b, len(x)) for a, b in itertools.pairwise(SIZES)]
    ir = popxl.Ir()
    with ir.main_graph:
        stream = popxl.h2d_stream(x.shape, popxl.float32, name="x")
        h = ops.host_load(stream)
        for i, (layer, coo, bias) in enumerate(zip(layers, patterns, biases)):
            impl = layer.encode(coo)
            meta = popxl.constant(impl.meta_info, popxl.uint16, name=f"meta_info{i}")
            nz = popxl.constant(impl.nz_values, popxl.float32, name=f"nz_values{i}")
            h = ops.sparse.fully_connected(h, meta, nz, layer.params, OPTIONS, DEVICE)
            h = h + popxl.constant(bias, name=f"bias{i}")
            if i < len(layers) - 1:
                h = ops.relu(h)
        out = popxl.d2h_stream(h.shape, h.dtype, name="logits")
        ops.host_store(out, h)
    with popxl.Session(ir, DEVICE) as session:
        return session.run({stream: x})[out].argmax(axis=-1)


def positions(coo: COOMatrix) -> set[tuple[int, int]]:
    return set(zip(coo.row_indices.tolist(), coo.column_indices.tolist()))


def train_sparse(seed: int = 0) -> float:
    """Train with RigL; returns the test accuracy."""
    x_train, y_train, x_test, y_test = digits.load_digits()
    rng = np.random.default_rng(seed)
    layers = [Layer(a, b, BATCH) for a, b in itertools.pairwise(SIZES)]
    initial = [initial_pattern(layer, rng) for layer in layers]
    trainer = Trainer(layers, initial)
    engine = trainer.session.engine
    steps = len(y_train) // BATCH
    t_end = int(END * EPOCHS * steps)
    t = 0
    with trainer.session:
        for epoch in range(EPOCHS):
            total, updates = 0.0, 0
            for s in track(range(steps), f"epoch {epoch + 1}/{EPOCHS}"):
                sl = slice(s * BATCH, (s + 1) * BATCH)
                total += trainer.step(x_train[sl], y_train[sl])
                t += 1
                if t % DELTA_T == 0 and t < t_end:
                    fraction = ALPHA / 2 * (1 + math.cos(math.pi * t / t_end))
                    grads, old = trainer.dense_grads(), trainer.patterns()
                    trainer.load([rigl(c, g, fraction) for c, g in zip(old, grads)])
                    updates += 1
            print(f"epoch {epoch + 1}: loss {total / steps:.4f}, {updates} RigL updates")
        final = trainer.patterns()
        biases = trainer.biases()
    assert trainer.session.engine is engine  # one compiled program throughout
    moved = [len(positions(b) - positions(a)) / len(a.nz_values) for a, b in zip(initial, final)]
    print("positions moved by RigL per layer: " + ", ".join(f"{m:.0%}" for m in moved))
    return float(np.mean(evaluate(final, biases, x_test) == y_test))


def main() -> None:
    start = time.perf_counter()
    sparse_accuracy = train_sparse()
    # the dense MLP of `tremula train` (its numbers are the same on every device: the CPU
    # target is the quickest)
    dense_accuracy, _, _ = digits.train(EPOCHS, device="cpu", log=False)
    print(
        f"test accuracy: sparse (density {DENSITY}, RigL, one compiled program) "
        f"{sparse_accuracy:.3f}, dense {dense_accuracy:.3f} "
        f"({time.perf_counter() - start:.1f} s)"
    )
    assert sparse_accuracy >= dense_accuracy - 0.05, (sparse_accuracy, dense_accuracy)


if __name__ == "__main__":
    main()
