#!/usr/bin/env python3
"""Start-up stress: many fresh processes, each training a transformer for a
few steps from an empty disk cache (issue 29, item 0).

An intermittent abort of a fresh process (``LLVM ERROR: SmallVector unable
to grow``) showed once in about a dozen starts and never in ten reruns, so
one start proves nothing: this runs ``--processes`` (50) of them,
``--jobs`` (2) at a time, each in its own empty ``LAZYMLIR_CACHE_DIR``, and
each one a new interpreter (imports, the prewarm thread, the first compile
with its parallel kernel compiles, the disk cache's first writes, the
background tier-up once the graphs have run ``LAZYMLIR_TIER_UP_RUNS`` times).
A worker trains Hugging Face ``BertForSequenceClassification`` (2 layers,
hidden 128: :func:`lazymlir.testing.hf_model`) with AdamW and ``mark_step()``
every step, and checks that the losses are finite. Every other process
sleeps a random fraction of a second between ``import lazymlir`` and its
first step (``--jitter``), so that the first compile meets the prewarm
thread at varying points of its imports.

Prints one line per failure as it happens and a summary: processes run,
how many failed (non-zero exit, killed by a signal, timed out), and each
failure's exit status and stderr tail. Workers run with Python's
faulthandler (every thread's Python stack on SIGABRT/SIGSEGV) and may dump
core (in their own scratch directory): a failure's core is read with gdb
(every thread's native backtrace) and kept with its stderr under
``--keep`` (build/stress). Exits 1 if any failed.

    python tools/stress.py [--processes 50] [--jobs 2] [--steps 6] [--env NAME=VALUE]

``--short`` (issue 47): short processes instead, each running the script of
test_compile_cache's ``test_two_processes_fill_one_cache_at_once``
(:data:`SHORT_SCRIPT`): a small MLP trained with Adam for ``--steps`` (4)
steps on the CPU and then on the lazy device, ``float(loss)`` after each
``mark_step()``, at module level, the lazy losses and parameters checked
against the CPU's; they start two at a time (``--jobs``) on ONE
empty cache directory per pair, so both fill it at once, and exit at once.
Most of such a process's life is imports, the first compiles and the exit:
the exit's races (a thread still running while the interpreter finalizes)
show here, not in long ones.

    python tools/stress.py --short --processes 400
"""

import argparse
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker(args) -> int:
    """One fresh process: train ``args.steps`` steps on the lazy device."""
    import math

    import torch

    import lazymlir
    from lazymlir.testing import hf_model

    if args.jitter:
        # Vary where the first compile falls against the prewarm thread's imports.
        time.sleep(args.jitter)
    torch.manual_seed(0)
    model, make_batch, loss_fn = hf_model(args.model)
    model = model.to("lazy")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model, make_batch("lazy"))
        loss.backward()
        opt.step()
        lazymlir.mark_step()
        losses.append(loss)
    values = [float(v.item()) for v in losses]
    if not all(math.isfinite(v) for v in values):
        print(f"non-finite loss: {values}", file=sys.stderr)
        return 3
    print(" ".join(f"{v:.4f}" for v in values))
    return 0


# --short's process: test_compile_cache's script (its module-level names,
# the model, optimizer and loss among them, live until the interpreter
# finalizes), with the lazy run checked against the CPU's: exit 3 if they
# differ or nothing compiled.
SHORT_SCRIPT = r"""
import json, sys, warnings
import torch, lazymlir
from lazymlir import metrics

STEPS = int(sys.argv[1])

def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16),
                               torch.nn.Tanh(), torch.nn.Linear(16, 3))

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    results = []
    for device in ("cpu", "lazy"):
        model = make().to(device)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        torch.manual_seed(1)
        losses = []
        for step in range(STEPS):
            x, y = torch.randn(8, 12), torch.randint(0, 3, (8,))
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
            if device == "lazy":
                lazymlir.mark_step()
            losses.append(float(loss))
        results.append((losses, [p.detach().cpu() for p in model.parameters()]))
(eager_losses, eager_params), (lazy_losses, lazy_params) = results
report = lazymlir.metrics.compile_report()
r = {
    "max_loss_diff": max(abs(a - b) for a, b in zip(eager_losses, lazy_losses)),
    "max_param_diff": max(float((a - b).abs().max()) for a, b in zip(eager_params, lazy_params)),
    "disk_hits": lazymlir.cache.stats().disk_hits,
    "disk_misses": lazymlir.cache.stats().disk_misses,
    "kernels_compiled": report["kernels_compiled"],
    "compiled": metrics.counter_value("UncachedCompile") + metrics.counter_value("CachedCompile"),
    "fallback": metrics.counter_value("CompileFallback") + metrics.counter_value("EagerGraph"),
}
print(json.dumps(r))
if not (r["max_loss_diff"] < 1e-4 and r["max_param_diff"] < 1e-4 and r["compiled"] > 0 and r["fallback"] == 0):
    print(f"lazy differs from the CPU, or did not compile: {r}", file=sys.stderr)
    sys.exit(3)
"""


def _allow_core() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def _backtrace(python: str, core: str) -> str:
    """Every thread's native backtrace in ``core`` (gdb), or why not."""
    gdb = shutil.which("gdb")
    if not gdb:
        return "(no gdb: core kept)"
    try:
        out = subprocess.run(
            [
                gdb,
                "-batch",
                "-nx",
                "-ex",
                "set pagination off",
                "-ex",
                "info threads",
                "-ex",
                "thread apply all bt 40",
                os.path.realpath(python),
                core,
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        return out.stdout + out.stderr
    except subprocess.TimeoutExpired:
        return "(gdb timed out)"


def _describe(rc: int) -> str:
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit {rc}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--processes", type=int, default=50)
    p.add_argument("--jobs", type=int, default=2, help="processes at a time")
    p.add_argument("--steps", type=int, help="training steps per process (6, tier-up after 4; --short: 4)")
    p.add_argument(
        "--short",
        action="store_true",
        help="short processes (a small MLP, float(loss) each step), two at a time on one empty cache per pair",
    )
    p.add_argument("--model", default="bert", help="lazymlir.testing.hf_model kind")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per process")
    p.add_argument("--seed", type=int, default=0, help="seed of the jitter delays")
    p.add_argument("--tail", type=int, default=25, help="stderr lines shown per failure")
    p.add_argument("--python", default=sys.executable)
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra environment for the workers (repeatable)",
    )
    p.add_argument(
        "--keep",
        default=os.path.join(ROOT, "build", "stress"),
        help="where a failure's stderr, core backtrace (and core, with --keep-cores) go",
    )
    p.add_argument("--keep-cores", action="store_true", help="keep failures' core files (large)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--jitter", type=float, default=0.0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.steps is None:
        args.steps = 4 if args.short else 6
    if args.worker:
        return worker(args)

    rng = random.Random(args.seed)
    base_env = dict(os.environ)
    base_env.pop("LAZYMLIR_FORCE_EAGER", None)
    for item in args.env:
        name, _, value = item.partition("=")
        base_env[name] = value
    scratch = tempfile.mkdtemp(prefix="lazymlir-stress-")
    pending = list(range(args.processes))
    running = {}  # index -> (Popen, cache dir, stderr file, start)
    # --short: processes 2k and 2k+1 share cache-k and start together, when
    # both fit; the directory goes when both are done.
    group = 2 if args.short else 1
    users = {}  # cache dir -> processes running in it
    failures = []
    durations = []
    started = time.monotonic()
    try:
        while pending or running:
            # A pair's second process starts with its first.
            while pending and (pending[0] % group or len(running) + group <= max(args.jobs, group)):
                i = pending.pop(0)
                cache_dir = os.path.join(scratch, f"cache-{i // group}")
                work_dir = os.path.join(scratch, f"cwd-{i}")  # where a core lands
                os.makedirs(cache_dir, exist_ok=True)
                users[cache_dir] = users.get(cache_dir, 0) + 1
                os.makedirs(work_dir)
                jitter = rng.uniform(0.0, 1.5) if i % 2 and not args.short else 0.0
                env = dict(base_env, LAZYMLIR_CACHE_DIR=cache_dir)
                err = open(os.path.join(scratch, f"stderr-{i}.txt"), "w+")
                if args.short:
                    cmd = [args.python, "-X", "faulthandler", "-c", SHORT_SCRIPT, str(args.steps)]
                else:
                    cmd = [
                        args.python,
                        "-X",
                        "faulthandler",
                        os.path.abspath(__file__),
                        "--worker",
                        "--steps",
                        str(args.steps),
                        "--model",
                        args.model,
                        "--jitter",
                        f"{jitter:.3f}",
                    ]
                proc = subprocess.Popen(
                    cmd, env=env, cwd=work_dir, stdout=subprocess.DEVNULL, stderr=err, preexec_fn=_allow_core
                )
                running[i] = (proc, cache_dir, err, time.monotonic())
            time.sleep(0.05)
            for i in list(running):
                proc, cache_dir, err, t0 = running[i]
                rc = proc.poll()
                if rc is None and time.monotonic() - t0 > args.timeout:
                    proc.kill()
                    rc = proc.wait()
                    reason = f"timed out after {args.timeout:.0f} s"
                elif rc is None:
                    continue
                else:
                    reason = _describe(rc)
                del running[i]
                durations.append(time.monotonic() - t0)
                err.seek(0)
                stderr = err.read()
                tail = stderr.splitlines()[-args.tail :]
                err.close()
                work_dir = os.path.join(scratch, f"cwd-{i}")
                done = args.processes - len(pending) - len(running)
                if rc != 0:
                    failures.append((i, reason, tail))
                    print(f"[{done}/{args.processes}] process {i}: {reason}", flush=True)
                    for line in tail:
                        print(f"    {line}", flush=True)
                    keep = os.path.join(args.keep, f"{time.strftime('%Y%m%d-%H%M%S')}-{i}")
                    os.makedirs(keep, exist_ok=True)
                    with open(os.path.join(keep, "stderr.txt"), "w") as f:
                        f.write(stderr)
                    cores = [os.path.join(work_dir, n) for n in os.listdir(work_dir) if n.startswith("core")]
                    for core in cores:
                        with open(os.path.join(keep, "backtrace.txt"), "w") as f:
                            f.write(_backtrace(args.python, core))
                        if args.keep_cores:
                            shutil.move(core, os.path.join(keep, os.path.basename(core)))
                    print(f"    kept in {keep}" + (" (with gdb backtraces)" if cores else ""), flush=True)
                users[cache_dir] -= 1
                if not users[cache_dir]:
                    shutil.rmtree(cache_dir, ignore_errors=True)
                shutil.rmtree(work_dir, ignore_errors=True)
                if rc == 0 and done % 10 == 0:
                    print(f"[{done}/{args.processes}] {len(failures)} failed so far", flush=True)
    finally:
        for proc, *_ in running.values():
            proc.kill()
        shutil.rmtree(scratch, ignore_errors=True)

    wall = time.monotonic() - started
    what = "short: an MLP, two at a time on one fresh cache per pair" if args.short else f"{args.model}, fresh cache"
    print(
        f"\nstress: {args.processes} processes ({what}, {args.steps} steps each, "
        f"{max(args.jobs, group)} at a time) in {wall:.0f} s, {sum(durations) / max(1, len(durations)):.1f} s each"
    )
    print(f"failed: {len(failures)}" + (f" ({', '.join(f'#{i}: {r}' for i, r, _ in failures)})" if failures else ""))
    for i, reason, tail in failures:
        print(f"\n--- process {i}: {reason}; stderr tail:")
        print("\n".join(tail) if tail else "(empty)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
