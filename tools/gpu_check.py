"""Runs the GPU bundles `make gpu-bundles` wrote on a machine with an NVIDIA
GPU, checks their results against the references computed on the CPU and
times them against torch's CUDA eager and torch.compile (inductor).

    python3 tools/gpu_check.py build/gpu-bundles [--json PATH] [--no-compile] [--rounds N]

Imports torch, the standard library and ``lazymlir/gpu/launch.py`` by its
path: not the lazymlir package, not ``lazymlir._native``, not MLIR, so it
runs where none of them is installed (another Python, another torch). Exit
status: 0 when every graph matched its references, 1 when one did not (or
failed to run), 2 when the directory is unusable or there is no CUDA device.

The directory (the format `tools/gpu_bundles.py` writes, shared through the
helpers below): ``manifest.json`` lists the cases; each has one bundle per
chip (``<case>.<chip>.lzgpu``, lazymlir.gpu.launch's format) and, per graph,
its inputs, references and the graph's aten ops as Python source (torch.fx's
code, which the eager and inductor peers run). ``data.bin`` holds the stored
tensors, each a zlib stream at an offset, with the SHA-256 of its bytes. Big
float inputs are not stored but generated from a recipe by
:func:`portable_uniform`, integer arithmetic that gives the same bits on any
machine (each checked against the SHA-256 the builder recorded). References
are eager PyTorch on the CPU in float32 and the same graph in float64, at up
to 1024 sampled positions per output (all of a small one): an output passes
when it is as close to the float64 result as eager's float32 is, within 10x,
or within 1e-3 of the output's scale (the lazy device's own check against
eager: a reduction in another order divided by a small value, as in AdamW's
first step where a gradient is near its epsilon, moves further than eager's
rounding); NaNs and infinities must be where
eager has them; integers and booleans must be equal.
"""

import argparse
import functools
import hashlib
import importlib.util
import json
import math
import operator
import os
import statistics
import sys
import time
import zlib

MANIFEST_FORMAT, MANIFEST_VERSION = "lazymlir-gpu-check", 1
HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCH = os.path.join(HERE, "..", "python", "lazymlir", "gpu", "launch.py")
MASK32 = 0xFFFFFFFF


def load_launch():
    """lazymlir.gpu.launch loaded from its file alone: the package's
    __init__ (the tracer, torch-mlir, the native module) is never imported.
    Where lazymlir is installed, ``import torch`` would load its device
    (the ``torch.backends`` entry point, from the blocked package): off."""
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    for blocked in ("lazymlir", "lazymlir._native", "torch_mlir"):
        sys.modules.setdefault(blocked, None)  # an import of any of them fails loudly
    spec = importlib.util.spec_from_file_location("lazymlir_gpu_launch", os.path.abspath(LAUNCH))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def portable_uniform(torch, shape, dtype, seed: int, low: float, high: float):
    """Values in [low, high) from a hash of each element's index and
    ``seed``: int64 arithmetic whose products stay below 2**63, so every
    machine and torch version computes the same bits (no RNG)."""
    n = math.prod(shape)
    h = torch.arange(n, dtype=torch.int64)
    h = (h * 0x9E3779B1 + (seed * 0x7FEB352D & MASK32)) & MASK32
    for multiplier, shift in ((0x7FEB352D, 15), (0x2C1B3C6D, 13), (0x297A2D39, 16)):
        h = h ^ (h >> shift)
        h = (h * multiplier) & MASK32
    h = h ^ (h >> 16)
    if dtype.is_floating_point:
        values = low + (high - low) * (h.double() / 2.0**32)
    else:
        values = int(low) + h % max(1, int(high) - int(low))
    return values.to(dtype).reshape(shape)


def tensor_sha256(torch, t) -> str:
    t = t.detach().contiguous().cpu()
    return hashlib.sha256(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"").hexdigest()


def dtype_of(torch, name: str):
    return getattr(torch, name)


def fx_function(torch, code: str, device):
    """The graph's aten ops (torch.fx's generated ``forward(self, *inputs)``),
    with factory ops moved to ``device``: a function of its own code object
    for each graph (torch.compile caches by code object)."""
    namespace = {
        "torch": torch,
        "inf": math.inf,
        "nan": math.nan,
        "getitem": operator.getitem,
        "device": lambda *a, **k: device,  # the graph was traced on the CPU
    }
    exec(compile(code, "<graph>", "exec"), namespace)
    return namespace["forward"]


class Data:
    """data.bin: zlib streams addressed by (offset, length), each checked
    against the SHA-256 of its bytes."""

    def __init__(self, path: str):
        with open(path, "rb") as f:
            self.raw = f.read()

    def tensor(self, torch, blob: dict, dtype, shape):
        offset, length = blob["at"]
        data = zlib.decompress(self.raw[offset : offset + length])
        if hashlib.sha256(data).hexdigest() != blob["sha256"]:
            raise ValueError(f"data.bin is corrupted at offset {offset}")
        return (
            torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape) if data else torch.empty(shape, dtype=dtype)
        )


def make_input(torch, spec: dict, data: Data):
    dtype, shape = dtype_of(torch, spec["dtype"]), spec["shape"]
    if "recipe" in spec:
        r = spec["recipe"]
        t = portable_uniform(torch, shape, dtype, r["seed"], r["low"], r["high"])
    elif "fill" in spec:
        t = torch.full(shape, spec["fill"], dtype=dtype)
    else:
        t = data.tensor(torch, spec["blob"], dtype, shape)
    if tensor_sha256(torch, t) != spec["sha256"]:
        raise ValueError(
            f"an input ({spec['dtype']} {shape}) is not what the builder recorded: "
            f"{'its recipe gives other bits on this machine' if 'recipe' in spec else 'corrupted'}"
        )
    return t


def compare(torch, out, spec: dict, data: Data) -> dict:
    """One output against its references: {'ok', 'err' (largest difference
    from float64, relative to the output's scale), 'why'}."""
    out = out.detach().cpu().reshape(-1)
    positions = data.tensor(torch, spec["positions"], torch.int64, [-1]) if spec.get("positions") else None
    got = out if positions is None else out[positions]
    if not spec["float"]:
        want = data.tensor(torch, spec["exact"], dtype_of(torch, spec["dtype"]), [-1])
        equal = torch.equal(got, want)
        return {
            "ok": equal,
            "err": 0.0 if equal else 1.0,
            "why": "" if equal else f"{int((got != want).sum())} of {want.numel()} sampled elements differ",
        }
    ref64 = data.tensor(torch, spec["ref64"], torch.float64, [-1])
    got = got.double()
    finite = torch.isfinite(ref64)
    if not torch.equal(finite, torch.isfinite(got)) or not torch.equal(
        got[~finite].nan_to_num(), ref64[~finite].nan_to_num()
    ):
        return {"ok": False, "err": math.inf, "why": "NaN or infinity where eager has none, or the reverse"}
    scale = spec["scale"]
    d = (got[finite] - ref64[finite]).abs().max().item() if finite.any() else 0.0
    bound = max(10 * spec["eager_err"], 1e-3 * scale) + 1e-6
    return {
        "ok": d <= bound,
        "err": d / scale if scale > 1e-6 else d,
        "why": ""
        if d <= bound
        else f"largest difference from float64 {d:.3g}, allowed {bound:.3g} "
        f"(eager float32's {spec['eager_err']:.3g}, scale {scale:.3g})",
    }


def median_ms(torch, fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_bandwidth(torch) -> float:
    """Bytes per second of a device-to-device copy (read + write), 512 MiB."""
    a = torch.empty(128 << 20, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    ms = median_ms(torch, lambda: b.copy_(a), 20)
    return 2 * a.numel() * 4 / (ms * 1e-3)


def verify(directory: str) -> dict:
    """The manifest, with every listed file's checksum checked."""
    path = os.path.join(directory, "manifest.json")
    try:
        with open(path) as f:
            manifest = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise SystemExit(f"gpu_check: {path} is not readable: {e} (build it with `make gpu-bundles`)") from None
    if manifest.get("format") != MANIFEST_FORMAT or manifest.get("version") != MANIFEST_VERSION:
        raise SystemExit(f"gpu_check: {path} is not a {MANIFEST_FORMAT} v{MANIFEST_VERSION} manifest")
    for name, digest in manifest["files"].items():
        with open(os.path.join(directory, name), "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != digest:
                raise SystemExit(f"gpu_check: {name} does not match its checksum in the manifest")
    return manifest


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", help="what `make gpu-bundles` wrote (build/gpu-bundles)")
    parser.add_argument("--json", help="where to write the results (default: DIRECTORY/gpu_check.json)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile (inductor)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds")
    parser.add_argument("--only", default="", help="comma-separated case names")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also list each case's top kernels (torch.profiler's CUDA records, matched to the "
        "plans' launches in order) with their grids and blocks",
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=240,
        help="past this many seconds, later cases skip torch.compile (its compiles are the slow part)",
    )
    options = parser.parse_args(argv)
    options.started = time.time()
    t_start = time.time()
    try:
        manifest = verify(options.directory)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    import torch

    launch = load_launch()
    if not torch.cuda.is_available():
        print(
            "gpu_check: no CUDA device (torch.cuda.is_available() is False): run this on a machine with an "
            f"NVIDIA GPU; the bundles in {options.directory} verified ({len(manifest['cases'])} cases)",
            file=sys.stderr,
        )
        return 2
    # torch.compile keys its cache by one wrapper's code for every function:
    # past its recompile limit a graph would silently run eagerly.
    torch._dynamo.config.recompile_limit = torch._dynamo.config.accumulated_recompile_limit = 1024
    torch.backends.cuda.matmul.allow_tf32 = False  # the references are float32 arithmetic
    torch.backends.cudnn.allow_tf32 = False
    device = torch.device("cuda")
    device_chip = launch.chip_of_capability(*torch.cuda.get_device_capability())
    data = Data(os.path.join(options.directory, "data.bin"))
    bandwidth = copy_bandwidth(torch)
    print(
        f"gpu_check: {torch.cuda.get_device_name()} ({device_chip}), torch {torch.__version__}, "
        f"copy bandwidth {bandwidth / 1e9:.0f} GB/s (read + write)",
        flush=True,
    )
    only = set(filter(None, options.only.split(",")))
    rows, failed = [], False
    for case in manifest["cases"]:
        if only and case["name"] not in only:
            continue
        row = run_case(torch, launch, case, options, data, device, device_chip, bandwidth)
        failed |= not row["ok"]
        rows.append(row)
        print(format_row(row), flush=True)
    print()
    print(table(rows, device_chip))
    result = {
        "device": torch.cuda.get_device_name(),
        "chip": device_chip,
        "torch": torch.__version__,
        "copy_bandwidth_GBps": bandwidth / 1e9,
        "cases": rows,
        "ok": not failed,
        "wall_s": time.time() - t_start,
    }
    out = options.json or os.path.join(options.directory, "gpu_check.json")
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(
        f"gpu_check: {'all cases match' if not failed else 'MISMATCHES (see the table)'}; "
        f"{time.time() - t_start:.0f} s; results in {out}"
    )
    return 1 if failed else 0


def run_case(torch, launch, case, options, data, device, device_chip, bandwidth) -> dict:
    row = {"case": case["name"], "graphs": len(case["graphs"]), "ok": True, "errors": [], "ms": {}}
    try:
        inputs = [[make_input(torch, s, data).to(device) for s in g["inputs"]] for g in case["graphs"]]
    except Exception as e:
        row.update(ok=False, errors=[f"inputs: {e}"])
        return row
    peers = {}  # name -> a function running every graph of the case once
    for chip, file in case["bundles"].items():
        try:
            executables = launch.load_bundle(os.path.join(options.directory, file), device_chip=device_chip)
            runs = []
            for g, args in zip(case["graphs"], inputs):
                executable = executables[g["name"]]
                outs = [
                    torch.empty_strided(a["shape"], a["strides"], dtype=dtype_of(torch, a["dtype"]), device=device)
                    for a in executable.arguments[len(args) :]
                ]
                runs.append((executable, args + outs, outs, g))
            for executable, buffers, outs, g in runs:  # correctness first: one run each
                executable.run(buffers)
                check_outputs(torch, row, f"lazymlir {chip}", outs, g, data)
            peers[f"lazymlir {chip}"] = lambda runs=runs: [e.run(b) for e, b, _, _ in runs]
            # The same plans captured as CUDA graphs: kernels without the
            # Python launch loop in between (what a replaying device pays).
            captured = [e.capture(b) for e, b, _, _ in runs]
            for _, _, outs, _ in runs:  # what the replays write is what is checked
                for out in outs:
                    out.fill_(float("nan") if out.is_floating_point() else 0)
            for replay, (_, _, outs, g) in zip(captured, runs):
                replay.replay()
                check_outputs(torch, row, f"lazymlir {chip} graph", outs, g, data)
            peers[f"lazymlir {chip} graph"] = lambda captured=captured: [c.replay(check=False) for c in captured]
            row.setdefault("replays", []).extend(captured)
            if options.profile and chip == device_chip:
                row["top_kernels"] = profile_kernels(torch, runs)
        except Exception as e:
            row["ok"] = False
            row["errors"].append(f"{chip}: {type(e).__name__}: {str(e)[:500]}")
    functions = [functools.partial(fx_function(torch, g["fx"], device), None) for g in case["graphs"]]
    with torch.no_grad():
        try:
            for fn, args, g in zip(functions, inputs, case["graphs"]):
                check_outputs(torch, row, "torch eager", list(fn(*args)), g, data, torch_peer=True)
            peers["eager"] = lambda: [fn(*args) for fn, args in zip(functions, inputs)]
        except Exception as e:
            row["errors"].append(f"eager: {type(e).__name__}: {str(e)[:300]}")
        if options.no_compile or time.time() - options.started > options.budget_s:
            row["errors"].append("note: torch.compile skipped" + ("" if options.no_compile else " (time budget)"))
        else:
            try:
                t0 = time.time()
                compiled = [functools.partial(torch.compile(fn.func), None) for fn in functions]
                for fn, args in zip(compiled, inputs):
                    fn(*args)
                row["inductor_compile_s"] = time.time() - t0
                peers["inductor"] = lambda: [fn(*args) for fn, args in zip(compiled, inputs)]
            except Exception as e:
                row["errors"].append(f"inductor: {type(e).__name__}: {str(e)[:300]}")
        samples = {name: [] for name in peers}
        for name, fn in peers.items():  # warm-up
            for _ in range(2):
                fn()
        for _ in range(options.rounds):  # interleaved rounds, the median of each peer's
            for name, fn in peers.items():
                try:
                    samples[name].append(median_ms(torch, fn, 3))
                except Exception as e:
                    row["ok"] = False
                    row["errors"].append(f"{name} (timing): {type(e).__name__}: {str(e)[:300]}")
                    samples[name] = []
        row["ms"] = {name: statistics.median(s) for name, s in samples.items() if s}
    for replay in row.pop("replays", []):  # the timed replays' runtime checks, read once
        try:
            replay.check()
        except Exception as e:
            row["ok"] = False
            row["errors"].append(f"graph replay: {type(e).__name__}: {str(e)[:300]}")
    if case.get("bytes") and row["ms"]:
        for name, ms in row["ms"].items():
            row.setdefault("bandwidth_share", {})[name] = case["bytes"] / (ms * 1e-3) / bandwidth
    if case.get("flops") and row["ms"]:
        row["tflops"] = {name: case["flops"] / (ms * 1e-3) / 1e12 for name, ms in row["ms"].items()}
    return row


def profile_kernels(torch, runs, repeats: int = 3, top: int = 12) -> list:
    """Each launch step of the plans (module, grid, block) with its CUDA
    time, from torch.profiler's kernel records: they come in launch order,
    so the i-th kernel of a run is the plan's i-th launch (every kernel of a
    plan is named main_kernel). The slowest ``top``, with their share."""
    from torch.profiler import ProfilerActivity, profile

    launches = [(g["name"], st) for e, _, _, g in runs for st in e.plan["steps"] if st["op"] == "launch"]
    for e, b, _, _ in runs:
        e.run(b)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            for e, b, _, _ in runs:
                e.run(b)
        torch.cuda.synchronize()
    names = {st["kernel"] for _, st in launches}
    kernels = sorted(
        (ev for ev in prof.events() if ev.device_type == torch.autograd.DeviceType.CUDA and ev.name in names),
        key=lambda ev: ev.time_range.start,
    )
    if len(kernels) != repeats * len(launches):
        return [{"note": f"{len(kernels)} kernel records for {repeats} x {len(launches)} launches: not matched"}]
    totals = {}
    for i, ev in enumerate(kernels):
        graph, st = launches[i % len(launches)]
        key = (graph, st["module"])
        t = totals.setdefault(
            key,
            {"graph": graph, "module": st["module"], "grid": st["grid"], "block": st["block"], "us": 0.0, "calls": 0},
        )
        t["us"] += ev.time_range.elapsed_us()
        t["calls"] += 1
    whole = sum(t["us"] for t in totals.values())
    rows = sorted(totals.values(), key=lambda t: -t["us"])[:top]
    for t in rows:
        t["share"] = t["us"] / whole if whole else 0.0
        t["us_per_call"] = t["us"] / t["calls"]
    return [{"kernel_ms_per_run": whole / 1e3 / repeats, "launches_per_run": len(launches)}] + rows


def format_kernels(rows) -> str:
    if not rows or "note" in rows[0]:
        return f"    kernels: {rows[0]['note'] if rows else 'none'}"
    head = rows[0]
    lines = [f"    kernels: {head['kernel_ms_per_run']:.3f} ms a run in {head['launches_per_run']} launches; slowest:"]
    for t in rows[1:]:
        threads = 1
        for n in t["grid"] + t["block"]:
            threads *= n
        lines.append(
            f"      {t['share']:5.1%} {t['us_per_call']:9.1f} us  {t['module']:<16} grid {t['grid']} "
            f"block {t['block']} ({threads} threads)"
        )
    return "\n".join(lines)


def check_outputs(torch, row, peer, outs, graph, data, torch_peer=False) -> None:
    torch.cuda.synchronize()
    worst = row.setdefault("max_rel_err", {}).get(peer, 0.0)
    for i, (out, spec) in enumerate(zip(outs, graph["outputs"])):
        if list(out.shape) != spec["shape"]:
            verdict = {"ok": False, "err": math.inf, "why": f"shape {list(out.shape)}, expected {spec['shape']}"}
        else:
            verdict = compare(torch, out, spec, data)
        worst = max(worst, verdict["err"])
        if not verdict["ok"]:
            message = f"{peer}: graph {graph['name']} output {i}: {verdict['why']}"
            if torch_peer:  # torch's CUDA eager differing from the CPU reference is noted, not ours to fail
                message = "note: " + message
            else:
                row["ok"] = False
            if len(row["errors"]) < 12:
                row["errors"].append(message)
    row["max_rel_err"][peer] = worst


def format_row(row) -> str:
    status = "ok" if row["ok"] else "FAIL"
    times = ", ".join(f"{k} {v:.3f} ms" for k, v in row["ms"].items())
    lines = [f"[{status}] {row['case']}: {row['graphs']} graph(s); {times}"]
    lines += [f"    {e}" for e in row["errors"]]
    if "top_kernels" in row:
        lines.append(format_kernels(row["top_kernels"]))
    return "\n".join(lines)


def table(rows, device_chip) -> str:
    peers = []
    for r in rows:
        peers += [p for p in r["ms"] if p not in peers]
    head = (
        ["case", "ok"]
        + [f"{p} ms" for p in peers]
        + ["ours/eager", "ours/inductor", "graph/eager", "max rel err", "note"]
    )
    lines = []
    for r in rows:
        ours = r["ms"].get(f"lazymlir {device_chip}") or next(
            (v for k, v in r["ms"].items() if k.startswith("lazymlir") and "graph" not in k), None
        )
        replayed = r["ms"].get(f"lazymlir {device_chip} graph")
        ratio = lambda peer, ours=ours: f"{ours / r['ms'][peer]:.2f}x" if ours and r["ms"].get(peer) else "-"
        note = []
        if "bandwidth_share" in r:
            note.append(
                "share of copy bandwidth: " + ", ".join(f"{k} {v:.0%}" for k, v in r["bandwidth_share"].items())
            )
        if "tflops" in r:
            note.append("TFLOP/s: " + ", ".join(f"{k} {v:.1f}" for k, v in r["tflops"].items()))
        errs = [v for k, v in r.get("max_rel_err", {}).items() if k.startswith("lazymlir")]
        lines.append(
            [r["case"], "ok" if r["ok"] else "FAIL"]
            + [f"{r['ms'][p]:.3f}" if p in r["ms"] else "-" for p in peers]
            + [
                ratio("eager"),
                ratio("inductor"),
                ratio("eager", replayed),
                f"{max(errs):.1e}" if errs else "-",
                "; ".join(note),
            ]
        )
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
    fmt = lambda cells: " | ".join(str(c).ljust(w) for c, w in zip(cells, widths))
    return "\n".join([fmt(head), "-+-".join("-" * w for w in widths)] + [fmt(row) for row in lines])


if __name__ == "__main__":
    sys.exit(main())
