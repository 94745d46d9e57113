"""The ResNet image encoder of the model tests (``tests/models/resnet_popxl.py``, written as
Graphcore's PopXL vision models are, on popxl-addons) against PyTorch eager on the same
model: Hugging Face's ``ResNetForImageClassification`` of the tests' config (embedding 8,
hidden sizes 16 and 32, one bottleneck per stage, batch 2 of 3 x 32 x 32 images, 10
labels; float32), host time per call, both sides interleaved in one process on one thread
(``bench_vs_torch.interleaved``):

- ``forward``: the logits through ``session.run`` on ``ipu_model`` (Mk2), against
  ``model(pixels)`` under ``torch.no_grad()``;
- ``training step``: forward, cross entropy, backward and an Adam step of every trainable
  weight clipped to the gradients' global norm (batch norms' statistics frozen), against
  the same in torch (``model.eval()``, ``clip_grad_norm_``, ``optim.AdamW``).

It also prints the Session creation time of each program (lowering and compile) and the
simulated cycles of one run, a fact of the cost model (the same on every host).

``--resnet50 N`` measures only the session creation of a ResNet-50 forward (batch 1, 3 x
64 x 64 images, float32, 1000 labels; 53 convolutions, 25.6 M weights): N sessions created
from one Ir, each round followed by the same model's forward in PyTorch eager (the best of
5 calls), the reference for how fast the host is right now; it prints the best session
creation, the best PyTorch forward and their ratio (comparable between runs and commits on
one host), and the simulated cycles of one run.

Needs torch, transformers and popxl-addons (``$TREMULA_CLIENTS``, as the tests find it).
Run: ``python benchmarks/bench_resnet_popxl.py [--rounds 5] [--clock wall|cpu]
[--resnet50 N]``
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

# first: bench_vs_torch sets one BLAS thread before NumPy loads
import bench_vs_torch
import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _client_paths() -> None:
    """popxl-addons (``tools/clients.py``) and the model tests' folder on ``sys.path``."""
    spec = importlib.util.spec_from_file_location(
        "tremula_tools_clients", ROOT / "tools" / "clients.py"
    )
    assert spec is not None and spec.loader is not None
    clients = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = clients
    spec.loader.exec_module(clients)
    lookup = clients.find("popxl-addons")
    if lookup.missing:
        raise SystemExit(lookup.message)
    sys.path[:0] = [str(lookup["popxl-addons"]), str(ROOT / "tests" / "models")]


def _report(name: str, ours: float, theirs: float, median: float) -> None:
    print(
        f"{name}: Tremula {ours * 1e3:.2f} ms, PyTorch eager {theirs * 1e3:.2f} ms, ratio "
        f"{ours / theirs:.2f}x (median round {median:.2f}x)",
        flush=True,
    )


def simulated_cycles(session, feeds: dict) -> int:
    """The modelled cycles of one run of the session's program."""
    engine = session.engine
    engine.count_cycles = True
    session.run(feeds)
    engine.count_cycles = False
    return engine.run_cycles()


def resnet50_sessions(rounds: int) -> None:
    """Session creation of a ResNet-50 forward, ``rounds`` times, against PyTorch eager's
    forward of the same model measured between them (``bench_vs_torch.CLOCK``)."""
    import popxl_addons as addons
    import resnet_popxl
    import torch
    from popxl_addons.patterns import apply_pre_alias_patterns
    from test_resnet_popxl import pixels, random_hf_model

    import popxl

    torch.set_num_threads(1)
    clock = bench_vs_torch.CLOCK
    cfg = resnet_popxl.ResNetConfig(
        embedding_size=64,
        hidden_sizes=(256, 512, 1024, 2048),
        depths=(3, 4, 6, 3),
        image_size=64,
        batch_size=1,
        num_labels=1000,
    )
    start = clock()
    model = resnet_popxl.program(cfg, resnet_popxl.ResNetForImageClassification(cfg))
    with model.ir.main_graph:
        addons.host_store(model.outputs[0])
    apply_pre_alias_patterns(model.ir, level="default")
    print(f"ResNet-50 Ir built in {clock() - start:.1f} s (popxl-addons' initialisers)")
    hf_model = random_hf_model(cfg).eval()
    x = pixels(cfg, 0)
    x_t = torch.tensor(x)
    ours, theirs = [], []
    session = None
    for _ in range(rounds):
        session = None  # (the last round's, freed before the next is made)
        start = clock()
        session = popxl.Session(model.ir, "ipu_model")
        ours.append(clock() - start)
        forwards = []
        with torch.no_grad():
            for _ in range(5):
                start = clock()
                hf_model(x_t)
                forwards.append(clock() - start)
        theirs.append(min(forwards))
        print(f"  round: session creation {ours[-1]:.2f} s, PyTorch forward "
              f"{theirs[-1] * 1e3:.1f} ms", flush=True)  # fmt: skip
    assert session is not None
    with session:
        cycles = simulated_cycles(session, {model.pixels: x})
    print(
        f"ResNet-50 forward (batch 1, 64 x 64, float32, ipu_model): session creation "
        f"{min(ours):.2f} s (best of {rounds}), PyTorch eager forward {min(theirs) * 1e3:.1f} "
        f"ms, ratio {min(ours) / min(theirs):.0f}x; {cycles} simulated cycles",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=5, help="calls per round")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument(
        "--resnet50",
        type=int,
        metavar="N",
        help="only the session creation of a ResNet-50 forward, N rounds",
    )
    args = parser.parse_args()
    bench_vs_torch.CLOCK = time.perf_counter if args.clock == "wall" else time.process_time
    print(f"clock: {args.clock}", flush=True)
    _client_paths()
    if args.resnet50:
        resnet50_sessions(args.resnet50)
        return
    import popxl_addons as addons
    import resnet_popxl
    import resnet_training
    import t5_training
    import torch
    from popxl_addons.patterns import apply_pre_alias_patterns
    from test_resnet_popxl import pixels, random_hf_model, torch_loss

    import popxl

    torch.set_num_threads(1)
    cfg = resnet_popxl.ResNetConfig(trainable_batch_norm=True)
    hf_model = random_hf_model(cfg)
    x, labels = pixels(cfg, 0), np.array([3, 7], dtype=np.int32)
    x_t = torch.tensor(x)
    mapping = resnet_popxl.ResNetForImageClassification.hf_mapping

    # ---- forward ----
    model = resnet_popxl.program(cfg, resnet_popxl.ResNetForImageClassification(cfg))
    ir, h2d, variables = model.ir, model.pixels, model.variables
    with ir.main_graph:
        addons.host_store(model.outputs[0])
    apply_pre_alias_patterns(ir, level="default")
    start = time.perf_counter()
    with popxl.Session(ir, "ipu_model") as session:
        created = time.perf_counter() - start
        session.write_variables_data(mapping(cfg, variables, hf_model))

        def torch_forward() -> None:
            with torch.no_grad():
                hf_model(x_t)

        cycles = simulated_cycles(session, {h2d: x})
        ours, theirs, median = bench_vs_torch.interleaved(
            lambda: session.run({h2d: x}), torch_forward, args.reps, args.rounds
        )
    print(f"forward: session creation {created:.2f} s, {cycles} simulated cycles", flush=True)
    _report("forward (ipu_model)", ours, theirs, median)

    # ---- training step ----
    adam = t5_training.Adam()
    step = resnet_training.training_step(cfg, adam)
    model = hf_model.eval()
    torch_adam = torch.optim.AdamW(model.parameters(), lr=1e-3)
    feeds = {
        step.inputs["pixels"]: x,
        step.inputs["labels"]: labels,
        step.inputs["lr"]: np.float32(1e-3),
    }

    def torch_step() -> None:
        torch_adam.zero_grad()
        torch_loss(model, x, labels).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), adam.max_norm)
        torch_adam.step()

    start = time.perf_counter()
    with popxl.Session(step.ir, "ipu_model") as session:
        created = time.perf_counter() - start
        session.write_variables_data(mapping(cfg, step.variables, hf_model))
        cycles = simulated_cycles(session, feeds)
        ours, theirs, median = bench_vs_torch.interleaved(
            lambda: session.run(feeds), torch_step, args.reps, args.rounds
        )
    print(f"training step: session creation {created:.2f} s, {cycles} simulated cycles")
    _report("training step (ipu_model)", ours, theirs, median)


if __name__ == "__main__":
    main()
