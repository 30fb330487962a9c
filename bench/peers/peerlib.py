"""What the peer scripts share. They run as scripts from this folder, so
Python finds this module next to them."""

import os


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


def blas_name():
    """The BLAS this process loaded, from its memory map."""
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        return "unknown"
    for name in ("openblas", "mkl", "blis", "libblas"):
        if name in maps:
            return {"libblas": "blas"}.get(name, name)
    return "none"
