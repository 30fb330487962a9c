"""What the peer scripts share. They run as scripts from this folder, so
Python finds this module next to them."""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time


def add_training_args(p, hidden, per, data):
    """Adds the arguments every training peer has to the parser p: hidden
    is --hidden's default, per what --batch, --steps and --threads count
    per ("rank", "worker"), data --data's default. The hidden --rank and
    --result are how the launcher starts a child and gets its result."""
    p.add_argument("--hidden", default=hidden, help="MLP hidden widths, comma-separated")
    p.add_argument("--batch", type=int, default=64, help="batch per " + per)
    p.add_argument("--lr", type=float, default=0.01, help="learning rate (constant)")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--steps", type=int, default=None, help="steps per " + per)
    p.add_argument("--epochs", type=int, default=None, help="epochs (when --steps is not given; default 1)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data", default=data, help="folder of the four Fashion-MNIST idx files")
    p.add_argument("--norm", choices=["standard", "unit"], default="standard",
                   help="pixel scaling: (p/255-0.2860)/0.3530 as Shoal's default, or p/255")
    p.add_argument("--threads", type=int, default=0, help="threads per %s (0: CPUs // workers, at least 1)" % per)
    p.add_argument("--json", action="store_true", help="print one JSON record")
    p.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--result", default="", help=argparse.SUPPRESS)


def check_training_args(p, args, bad, hidden_example):
    """Checks the arguments every training peer has (adding what is wrong to
    bad, the script's own complaints), stops with one error naming them all,
    and settles --epochs, --hidden and --threads."""
    if args.steps is not None and args.epochs is not None:
        p.error("give --steps or --epochs, not both")
    if args.steps is None and args.epochs is None:
        args.epochs = 1
    for ok, want in (
        (args.workers >= 1, "--workers >= 1"),
        (args.batch >= 1, "--batch >= 1"),
        (args.steps is None or args.steps >= 1, "--steps >= 1"),
        (args.epochs is None or args.epochs >= 1, "--epochs >= 1"),
        (args.threads >= 0, "--threads >= 0"),
        (args.lr >= 0 and 0 <= args.momentum < 1, "--lr >= 0 and --momentum in [0, 1)"),
        (args.timeout > 0, "--timeout > 0"),
        (args.seed >= 0, "--seed >= 0"),
    ):
        if not ok:
            bad.append(want)
    try:
        args.hidden_widths = [int(h) for h in args.hidden.split(",")]
        if any(h < 1 for h in args.hidden_widths):
            raise ValueError
    except ValueError:
        bad.append("--hidden like " + hidden_example)
    if bad:
        p.error("want " + ", ".join(bad))
    if args.threads == 0:
        try:
            cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = os.cpu_count() or 1
        args.threads = max(1, cpus // args.workers)


def set_threads(n):
    """Sets the thread counts of PyTorch's kernels, OpenMP and the BLAS to
    n. The libraries read them when they load: call it before importing
    torch."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)


def binds_workers(cpus, workers, per):
    """Whether shoal train --bind auto binds workers of per threads each
    on cpus CPUs: where they fit, with fewer than per CPUs left over."""
    return workers * per <= cpus and cpus - workers * per < per


def bind_worker(index, workers, per):
    """Binds this process to per CPUs of its own, the index-th share of
    those it may run on, where shoal train --bind auto would bind its
    workers (binds_workers); returns the CPUs, or None, binding nothing.
    Call it before importing torch: the threads started later inherit the
    binding (every thread there is now is bound too)."""
    allowed = sorted(os.sched_getaffinity(0))
    if not binds_workers(len(allowed), workers, per):
        return None
    cpus = allowed[index * per:(index + 1) * per]
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except ProcessLookupError:
            pass  # it has exited
    return cpus


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago, for the
    processes of a run to meet on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_result(path, result):
    """Writes a child's result as JSON to path, atomically: the launcher
    reads either all of it or no file."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, path)


def blas_name():
    """The BLAS of torch's CPU GEMMs: MKL where torch was built with it
    (statically linked, so absent from the memory map, where a wheel's
    bundled OpenBLAS may show instead: PyTorch 2.11 on the device machine),
    else the BLAS this process loaded, from its memory map."""
    try:
        import torch
        if torch.backends.mkl.is_available():
            return "mkl"
    except ImportError:
        pass
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        return "unknown"
    for name in ("openblas", "mkl", "blis", "libblas"):
        if name in maps:
            return {"libblas": "blas"}.get(name, name)
    return "none"


def die_with_parent():
    """In a child before exec: SIGKILL when the launcher dies."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run_children(cmds, envs, names, fail):
    """Runs one child process per command line, with its environment, and
    waits for all of them. Our stdout carries only the record, so theirs
    goes to our stderr. The first child that fails stops the others and
    ends this process through fail, naming it."""
    kids = []
    sys.stdout.flush()
    try:
        for cmd, env in zip(cmds, envs):
            kids.append(subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=sys.stderr.fileno(),
                                         preexec_fn=die_with_parent))
        running = set(range(len(kids)))
        while running:
            for r in sorted(running):
                rc = kids[r].poll()
                if rc is None:
                    continue
                running.discard(r)
                if rc != 0:
                    why = "exited with status %d" % rc if rc > 0 else "was killed by signal %d" % -rc
                    fail("%s %s (its error is above); stopped the others" % (names[r], why))
            time.sleep(0.05)
    finally:
        for k in kids:
            if k.poll() is None:
                k.kill()
        for k in kids:
            k.wait()


def main(prog, parse_args, child_main, child_name, launch, record, summary):
    """A peer's main: as a child (--rank >= 0) it runs child_main, and a
    failure ends it with one line naming child_name(rank) under its
    traceback; as the launcher it runs launch, turns what it returns into
    the record, and prints it (JSON with --json, else a summary)."""
    argv = sys.argv[1:]
    args = parse_args(argv)
    if args.rank >= 0:
        try:
            child_main(args)
        except Exception as e:  # noqa: BLE001 - one line for the launcher, the traceback above it
            import traceback
            traceback.print_exc()
            sys.exit("%s: %s: %s: %s" % (prog, child_name(args.rank), type(e).__name__, e))
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("%s: terminated; stopped the children" % prog))
    res = launch(args, argv)
    rec = record(args, res, [sys.executable] + sys.argv)
    if args.json:
        print(json.dumps(rec))
    else:
        print(summary(rec))
