"""Builds the GPU check's bundles on a machine without a GPU (`make gpu-bundles`).

    python tools/gpu_bundles.py OUTDIR [--chips sm_90,sm_80] [--quick] [--only NAMES]

Each case is traced on the lazy device (compiled for this CPU, so it runs)
with lazymlir.gpu.aot, and every graph it records is compiled for each chip into
``<case>.<chip>.lzgpu``. Per graph the manifest keeps its inputs (stored, or
for float tensors a portable recipe), its references (eager PyTorch on the
CPU in float32 and in float64, at sampled positions) and its aten ops as
torch.fx's Python code (what tools/gpu_check.py runs as the eager and inductor
peers). Then it verifies what it wrote: every bundle loads (format, version,
checksum), ptxas assembles every kernel module for its chip, and the
directory stays under 40 MiB. ``--quick``: small sizes and the MNIST step
only, for the tests.

Cases: chain (an elementwise chain over 16M floats, one kernel), softmax and
layernorm (4096 x 1024), matmul_1024, matmul_4096, and the first training
step (forward, backward, optimizer with its state created) of the MNIST CNN
(Adadelta, batch 64, dropout off), the 2-layer LM (AdamW) and a 2-layer
BERT (hidden 128, AdamW).
"""

import argparse
import concurrent.futures
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib

import torch
import torch.nn.functional as F

import gpu_check
import lazymlir  # noqa: F401  (registers the lazy device)
from lazymlir import testing
from lazymlir.gpu import aot, launch
from lazymlir.execution import native

SAMPLES = 1024  # reference values kept per output
MAX_BYTES = 40 << 20


class Writer:
    """data.bin and the registry of portable inputs (by their bytes)."""

    def __init__(self, path):
        self.file = open(path, "wb")
        self.recipes = {}  # (sha256, shape, dtype) -> recipe / fill
        self.seed = 0

    def blob(self, t: torch.Tensor) -> dict:
        raw = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        packed = zlib.compress(raw, 6)
        offset = self.file.tell()
        self.file.write(packed)
        return {"at": [offset, len(packed)], "sha256": hashlib.sha256(raw).hexdigest()}

    def portable(self, shape, dtype=torch.float32, low=-1.0, high=1.0) -> torch.Tensor:
        """A tensor the checker regenerates from a recipe instead of reading it."""
        self.seed += 1
        t = gpu_check.portable_uniform(torch, list(shape), dtype, self.seed, low, high)
        self.recipes[self._key(t)] = {"recipe": {"seed": self.seed, "low": low, "high": high}}
        return t

    def fill(self, t: torch.Tensor) -> None:
        self.recipes[self._key(t)] = {"fill": t.reshape(-1)[0].item()}

    def _key(self, t):
        return gpu_check.tensor_sha256(torch, t), tuple(t.shape), str(t.dtype)

    def input_spec(self, t: torch.Tensor) -> dict:
        t = t.detach().contiguous()
        spec = {
            "shape": list(t.shape),
            "dtype": str(t.dtype).split(".")[1],
            "sha256": gpu_check.tensor_sha256(torch, t),
        }
        how = self.recipes.get(self._key(t))
        if how is None:
            how = {"blob": self.blob(t)}
        return dict(spec, **how)

    def output_spec(self, ref32: torch.Tensor, ref64: torch.Tensor, index: int) -> dict:
        flat32, flat64 = ref32.detach().contiguous().reshape(-1), ref64.detach().contiguous().reshape(-1)
        spec = {
            "shape": list(ref32.shape),
            "dtype": str(ref32.dtype).split(".")[1],
            "float": ref32.dtype.is_floating_point,
        }
        positions = None
        if flat32.numel() > SAMPLES:
            g = torch.Generator().manual_seed(index)
            positions = torch.randperm(flat32.numel(), generator=g)[:SAMPLES].sort().values
            spec["positions"] = self.blob(positions)
        pick = (lambda t: t) if positions is None else (lambda t: t[positions])
        if not spec["float"]:
            spec["exact"] = self.blob(pick(flat32))
            return spec
        exact = flat64.double()
        finite = torch.isfinite(exact) & torch.isfinite(flat32)
        spec["ref64"] = self.blob(pick(exact))
        spec["scale"] = exact[finite].abs().max().item() if finite.any() else 0.0
        spec["eager_err"] = (flat32.double()[finite] - exact[finite]).abs().max().item() if finite.any() else 0.0
        return spec


def references(gm, inputs):
    """The graph run eagerly on the CPU: float32 outputs and float64 ones
    (float inputs promoted; an output eager keeps in float32, such as a
    graph's explicit cast, stays float32 in both)."""
    with torch.no_grad():
        ref32 = list(gm(*inputs))
        ref64 = list(gm(*[t.double() if t.is_floating_point() else t for t in inputs]))
    return ref32, ref64


def cases(w: Writer, quick: bool):
    """name -> (step, args, extra): step(*args) on the lazy device."""
    lazy = lambda t: t.to("lazy")
    n, rows, mm = (1 << 16, 256, 128) if quick else (1 << 24, 4096, 1024)

    def chain():
        x, y = lazy(w.portable([n])), lazy(w.portable([n]))
        return (lambda: torch.sigmoid(x * 1.5 + y) * torch.tanh(x - 0.25) + y), {"bytes": 3 * 4 * n}

    def softmax():
        x = lazy(w.portable([rows, 1024], low=-4, high=4))
        return (lambda: torch.softmax(x, -1)), {"bytes": 2 * 4 * rows * 1024}

    def layernorm():
        x, g, b = lazy(w.portable([rows, 1024], low=-3, high=3)), lazy(w.portable([1024])), lazy(w.portable([1024]))
        return (lambda: F.layer_norm(x, (1024,), g, b)), {"bytes": 2 * 4 * rows * 1024}

    def matmul(size):
        def make():
            a, b = lazy(w.portable([size, size])), lazy(w.portable([size, size]))
            return (lambda: a @ b), {"flops": 2 * size**3}

        return make

    def training(build):
        def make():
            torch.manual_seed(0)
            model, optimizer, batch, loss_fn = build()
            with torch.no_grad():
                for p in model.parameters():  # portable values of the initializer's range
                    flat = p.reshape(-1)
                    if bool((flat == flat[0]).all()):
                        w.fill(p.data)
                    else:
                        bound = p.abs().max().item()
                        p.copy_(w.portable(p.shape, low=-bound, high=bound))
            model.to("lazy")
            optimizer = optimizer(model.parameters())
            batch = [lazy(b) for b in batch]

            def step():
                optimizer.zero_grad()
                loss = loss_fn(model, batch)
                loss.backward()
                optimizer.step()
                return loss

            return step, {}

        return make

    def mnist():
        model = testing.MnistNet().eval()  # dropout off: a training step whose values eager can repeat
        x = w.portable([8 if quick else 64, 1, 28, 28], low=-0.5, high=2.5)
        y = torch.randint(0, 10, (x.shape[0],))
        return model, lambda ps: torch.optim.Adadelta(ps, lr=1.0), [x, y], lambda m, b: F.nll_loss(m(b[0]), b[1])

    def lm2():
        model, make_batch, loss = testing.transformer_lm(2)
        return model, lambda ps: torch.optim.AdamW(ps, lr=1e-3), list(make_batch("cpu")), loss

    def bert():
        model, make_batch, loss = testing.hf_model("bert")
        return model, lambda ps: torch.optim.AdamW(ps, lr=1e-3), list(make_batch("cpu")), loss

    all_cases = {
        "chain": chain,
        "softmax": softmax,
        "layernorm": layernorm,
        f"matmul_{mm}": matmul(mm),
        "matmul_4096": matmul(4096),
        "mnist_train": training(mnist),
        "lm2_train": training(lm2),
        "bert_train": training(bert),
    }
    if quick:
        return {k: all_cases[k] for k in ("chain", f"matmul_{mm}", "mnist_train")}
    return all_cases


def assemble(ptxas: str, chip: str, ptx: str, name: str) -> str:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        done = subprocess.run([ptxas, f"-arch={chip}", path, "-o", path + ".cubin"], capture_output=True, text=True)
        return "" if done.returncode == 0 else f"{name}: {done.stderr.strip()[:1000]}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="the directory to write (replaced)")
    parser.add_argument("--chips", default="sm_90,sm_80")
    parser.add_argument("--quick", action="store_true", help="small sizes, three cases (the tests)")
    parser.add_argument("--only", default="", help="comma-separated case names")
    options = parser.parse_args(argv)
    chips = options.chips.split(",")
    os.makedirs(options.out, exist_ok=True)
    for old in os.listdir(options.out):
        if old.endswith((".lzgpu", ".json", ".bin")):
            os.remove(os.path.join(options.out, old))
    w = Writer(os.path.join(options.out, "data.bin"))
    only = set(filter(None, options.only.split(",")))
    manifest = {
        "format": gpu_check.MANIFEST_FORMAT,
        "version": gpu_check.MANIFEST_VERSION,
        "chips": chips,
        "producer": f"lazymlir {native.code_identity()[:16]}, torch {torch.__version__}",
        "cases": [],
    }
    ptxas = os.path.join(native.cuda_toolkit(), "bin", "ptxas")
    jobs = []
    pool = concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2)
    for name, make in cases(w, options.quick).items():
        if only and name not in only:
            continue
        t0 = time.time()
        step, extra = make()
        recorded = aot.trace_step(step)
        case = dict({"name": name, "bundles": {}, "graphs": []}, **extra)
        for index, (graph_name, traced) in enumerate(recorded.items()):
            ref32, ref64 = references(traced.fx, traced.inputs)
            case["graphs"].append(
                {
                    "name": graph_name,
                    "fx": traced.fx.code,
                    "inputs": [w.input_spec(t) for t in traced.inputs],
                    "outputs": [w.output_spec(a, b, 1000 * index + i) for i, (a, b) in enumerate(zip(ref32, ref64))],
                }
            )
        kernels = 0
        for chip in chips:
            graphs = aot.compile_graphs(recorded, chip)
            for graph in case["graphs"]:
                plan = graphs[graph["name"]]
                if plan["inputs"] != len(graph["inputs"]) or len(plan["arguments"]) - plan["inputs"] != len(
                    graph["outputs"]
                ):
                    raise SystemExit(
                        f"gpu_bundles: {name}: graph {graph['name']}'s plan takes {plan['inputs']} inputs "
                        f"and {len(plan['arguments']) - plan['inputs']} outputs, its trace "
                        f"{len(graph['inputs'])} and {len(graph['outputs'])}"
                    )
            file = f"{name}.{chip}.lzgpu"
            launch.save_bundle(os.path.join(options.out, file), graphs, chip, producer=manifest["producer"])
            case["bundles"][chip] = file
            for graph_name, plan in graphs.items():
                for module_name, module in plan["modules"].items():
                    jobs.append(pool.submit(assemble, ptxas, chip, module["ptx"], f"{file}:{graph_name}.{module_name}"))
                    kernels += 1
        manifest["cases"].append(case)
        print(
            f"gpu_bundles: {name}: {len(recorded)} graph(s), {kernels} kernel modules for {', '.join(chips)}, "
            f"{time.time() - t0:.1f} s",
            flush=True,
        )
        del recorded, step
    w.file.close()
    failures = [e for e in (j.result() for j in jobs) if e]
    if failures:
        print(
            f"gpu_bundles: ptxas rejects {len(failures)} of {len(jobs)} kernel modules:\n" + "\n".join(failures[:5]),
            file=sys.stderr,
        )
        return 1
    files = {}
    for file in sorted(os.listdir(options.out)):
        if file.endswith((".lzgpu", ".bin")):
            with open(os.path.join(options.out, file), "rb") as f:
                files[file] = hashlib.sha256(f.read()).hexdigest()
    manifest["files"] = files
    with open(os.path.join(options.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    for case in manifest["cases"]:  # what the checker will read: loads, checksums
        for chip, file in case["bundles"].items():
            launch.load_bundle(os.path.join(options.out, file), device_chip=chip)
    gpu_check.verify(options.out)
    total = sum(os.path.getsize(os.path.join(options.out, f)) for f in os.listdir(options.out))
    print(
        f"gpu_bundles: {len(manifest['cases'])} cases, {len(jobs)} kernel modules assembled by ptxas, "
        f"{total / 2**20:.1f} MiB in {options.out}"
    )
    if total > MAX_BYTES:
        print(
            f"gpu_bundles: {options.out} is {total / 2**20:.1f} MiB, over the {MAX_BYTES >> 20} MiB that may "
            "travel to the GPU machine",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
