"""shoal.run: Horovod's horovod.run(func, args, np=N) on this host.

Starts np fresh Python processes (multiprocessing's spawn: no process
inherits a loaded libshoal or torch's threads), each with the SHOAL_*
variables of one rank and a loopback rendezvous, calls func(*args,
**kwargs) in each, and returns the results in rank order. func and its
arguments are pickled, so func must be importable by name (a module-level
function; in a script, one defined at top level with the script's work
under `if __name__ == "__main__":`). Only this host: hosts other than
localhost, elastic runs (min_np, max_np) and the launcher's ssh and MPI
options are refused; use_gloo, use_mpi, verbose and the like are accepted
and ignored (Shoal's ring is the only transport).
"""

import multiprocessing
import os
import socket
import traceback

_LOCAL = ("localhost", "127.0.0.1", "::1", socket.gethostname())
_REFUSED = ("min_np", "max_np", "slots", "reset_limit", "cooldown_range", "hostfile", "ssh_port",
            "ssh_identity_file", "mpi_args", "network_interface", "executable")


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank, func, args, kwargs, results):
    try:
        out = func(*args, **kwargs)
    except BaseException as e:  # noqa: B902: reported to the parent, which raises
        results.put((rank, False, "%s\n%s" % (e, traceback.format_exc())))
        raise SystemExit(1)
    results.put((rank, True, out))


def _check_hosts(hosts, np):
    if not hosts:
        return
    total = 0
    for h in hosts.split(","):
        name, _, slots = h.strip().partition(":")
        if name not in _LOCAL:
            raise NotImplementedError("shoal.run: hosts=%r: only this host is supported; launch the ranks on "
                                      "other machines with mpirun, Slurm or the SHOAL_* variables" % (hosts,))
        total += int(slots or 1)
    if total < np:
        raise ValueError("shoal.run: hosts=%r has %d slots for np=%d" % (hosts, total, np))


def run(func, args=(), kwargs=None, np=1, hosts=None, start_timeout=None, **options):
    """Runs func(*args, **kwargs) as np ranks on this host and returns the
    list of their results, rank 0's first. Raises RuntimeError naming the
    ranks that failed (with the first one's traceback)."""
    refused = [k for k in _REFUSED if options.get(k) is not None]
    if refused:
        raise NotImplementedError("shoal.run: %s not supported" % ", ".join(refused))
    np = int(np)
    if np < 1:
        raise ValueError("shoal.run: np=%d: want at least 1" % np)
    _check_hosts(hosts, np)
    kwargs = kwargs or {}
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    env = {"SHOAL_WORLD_SIZE": str(np), "SHOAL_LOCAL_SIZE": str(np),
           "SHOAL_MASTER": "127.0.0.1:%d" % _free_port(), "SHOAL_JOB_ID": "shoal-run-%d" % os.getpid()}
    if start_timeout is not None and "SHOAL_COLLECTIVE_TIMEOUT" not in os.environ:
        env["SHOAL_COLLECTIVE_TIMEOUT"] = str(start_timeout)
    procs = []
    saved = {k: os.environ.get(k) for k in list(env) + ["SHOAL_RANK", "SHOAL_LOCAL_RANK"]}
    try:
        for r in range(np):
            # a spawned child starts with the parent's environment as it is at start()
            os.environ.update(env, SHOAL_RANK=str(r), SHOAL_LOCAL_RANK=str(r))
            p = ctx.Process(target=_rank_main, args=(r, func, tuple(args), kwargs, results), name="shoal-rank-%d" % r)
            p.start()
            procs.append(p)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    got = {}
    while len(got) < np and (any(p.is_alive() for p in procs) or not results.empty()):
        try:
            r, ok, out = results.get(timeout=0.5)
        except Exception:  # queue.Empty: look at the processes again
            continue
        got[r] = (ok, out)
    for p in procs:
        p.join()
    failed = sorted(set(range(np)) - {r for r, (ok, _) in got.items() if ok})
    if failed:
        first = next((got[r][1] for r in failed if r in got), None)
        codes = ", ".join("rank %d: exit %s" % (r, procs[r].exitcode) for r in failed)
        raise RuntimeError("shoal.run: %d of %d ranks failed (%s)%s" % (len(failed), np, codes,
                                                                        "\n" + first if first else ""))
    return [got[r][1] for r in range(np)]
