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
    p.add_argument("--steps", type=int, default=6, help="training steps per process (tier-up after 4)")
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
    failures = []
    durations = []
    started = time.monotonic()
    try:
        while pending or running:
            while pending and len(running) < args.jobs:
                i = pending.pop(0)
                cache_dir = os.path.join(scratch, f"cache-{i}")
                work_dir = os.path.join(scratch, f"cwd-{i}")  # where a core lands
                os.makedirs(cache_dir)
                os.makedirs(work_dir)
                jitter = rng.uniform(0.0, 1.5) if i % 2 else 0.0
                env = dict(base_env, LAZYMLIR_CACHE_DIR=cache_dir)
                err = open(os.path.join(scratch, f"stderr-{i}.txt"), "w+")
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
                shutil.rmtree(cache_dir, ignore_errors=True)
                shutil.rmtree(work_dir, ignore_errors=True)
                if rc == 0 and done % 10 == 0:
                    print(f"[{done}/{args.processes}] {len(failures)} failed so far", flush=True)
    finally:
        for proc, *_ in running.values():
            proc.kill()
        shutil.rmtree(scratch, ignore_errors=True)

    wall = time.monotonic() - started
    print(
        f"\nstress: {args.processes} processes ({args.model}, {args.steps} steps each, fresh cache, "
        f"{args.jobs} at a time) in {wall:.0f} s, {sum(durations) / max(1, len(durations)):.1f} s each"
    )
    print(f"failed: {len(failures)}" + (f" ({', '.join(f'#{i}: {r}' for i, r, _ in failures)})" if failures else ""))
    for i, reason, tail in failures:
        print(f"\n--- process {i}: {reason}; stderr tail:")
        print("\n".join(tail) if tail else "(empty)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
