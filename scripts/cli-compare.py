#!/usr/bin/python3
"""Runs every command line of a list with two shoal binaries and compares
what a user of the command line sees: the exit status, the error and
warning messages, the help texts, the keys of --json output, and the shape
of the other lines. See scripts/cli-compare.sh for the usage.

Each line of the list is a bash command line in which `shoal` is the binary
under test (a symlink on PATH). It runs in a fresh empty folder, the same
path for both binaries, with TMPDIR a fresh folder too, stdin /dev/null, in
a process group of its own that is killed when the line ends or times out.
The helpers of scripts/cli-compare-helpers.sh (serve, stop, freeport,
gossipkey) are defined.

Per stream (stdout, stderr), after normalising volatile parts (ports of
host:port, temp paths, durations with fractions or sub-second units, rates,
pids, hex revisions, temp-file suffixes, dates and slog times):
  * a stream holding a "Usage" line is a help text: compared line by line;
  * otherwise a line that is a JSON object is compared by its set of keys
    (nested keys as a.b, array elements merged, numeric keys as #);
  * a line starting with "shoal", or naming an error, a refusal, a warning,
    must, want, cannot, unknown, invalid, fail... is compared exactly, in order;
  * memberlist's own log lines (gossip probes), a late worker's "joining a run
    under way" and stall warnings are left out: they follow the timing;
  * any other line (progress, tables) is compared by its shape, the text
    before its first digit, as a set: training progress differs run to run.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_list(path):
    lines = []
    with open(path) as f:
        for n, raw in enumerate(f, 1):
            s = raw.strip()
            if not s or s.startswith("#"):
                continue
            lines.append((n, s))
    return lines


def run_line(cmd, binary, work, timeout):
    """Runs cmd with binary as shoal; returns (rc, stdout, stderr, secs)."""
    bindir = os.path.join(work, "bin")
    link = os.path.join(bindir, "shoal")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(binary, link)
    cwd = os.path.join(work, "run")
    tmp = os.path.join(work, "tmp")
    for d in (cwd, tmp):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    env = dict(os.environ)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    env["TMPDIR"] = tmp
    env["LC_ALL"] = "C"
    env["REPO"] = os.path.dirname(HERE)
    env.pop("SHOAL_JSON", None)
    script = "source %s\n%s\n" % (os.path.join(HERE, "cli-compare-helpers.sh"), cmd)
    out_path, err_path = os.path.join(work, "stdout"), os.path.join(work, "stderr")
    start = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        p = subprocess.Popen(["bash", "-c", script], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                             stdout=out, stderr=err, start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
            rc = "timeout after %ds" % timeout
        # Whatever the line left running (servers, a worker) ends with it.
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    secs = time.monotonic() - start
    with open(out_path, "rb") as f:
        stdout = f.read().decode("utf-8", "replace")
    with open(err_path, "rb") as f:
        stderr = f.read().decode("utf-8", "replace")
    return rc, stdout, stderr, secs


class Normaliser:
    def __init__(self, binaries, work):
        self.literal = []
        for b in binaries:
            for p in {b, os.path.realpath(b)}:
                self.literal.append((p, "<shoal>"))
        for sub, name in (("run", "<dir>"), ("tmp", "<tmp>"), ("bin", "<bin>")):
            p = os.path.join(work, sub)
            self.literal.append((p, name))
            self.literal.append((os.path.realpath(p), name))
        self.literal.append((work, "<work>"))
        self.literal.append((os.path.dirname(HERE), "<repo>"))
        self.literal.sort(key=lambda kv: -len(kv[0]))
        self.rules = [
            (re.compile(r"\btime=\S+"), "time=<t>"),
            (re.compile(r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?( [A-Z]{3,4})?)?"), "<date>"),
            # The binaries are built at different commits.
            (re.compile(r"\brevision [^\s,]+( \(modified\))?"), "revision <rev>"),
            (re.compile(r"\bload \d+\.\d+"), "load <n>"),
            # bench plan measures a step here: the fastest mode follows the load.
            (re.compile(r"\bfastest: (async|sync|ssp|ring)\b"), "fastest: <mode>"),
            (re.compile(r"\b\d+(\.\d+)?×"), "<n>×"),
            (re.compile(r"/tmp/[A-Za-z0-9._-]+"), "<tmp>"),
            # os.CreateTemp's random suffix: .shoal-write-check-2164750287
            (re.compile(r"(?<=[A-Za-z]-)\d{5,}\b"), "<rand>"),
            # host:port, where the port is one the system picked.
            (re.compile(r"((?:\d{1,3}\.){3}\d{1,3}|localhost|\[[0-9a-fA-F:]*\]):\d{2,5}\b"), r"\1:<port>"),
            (re.compile(r"\bpid[ =:]*\d+"), "pid <n>"),
            (re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,64}\b"), "<hex>"),
            (re.compile(r"-?\b\d+(\.\d+)?\s?(ns|µs|us|ms)\b"), "<dur>"),
            (re.compile(r"\b(\d+h)?(\d+m)?\d+\.\d+s\b"), "<dur>"),
            (re.compile(r"\b(\d+h)?\d+m\d+s\b"), "<dur>"),
            (re.compile(r"\b\d+(\.\d+)?(e[+-]?\d+)?\s?(samples/s|steps/s|[KMGT]i?B/s|[KMGT]bit/s|B/s)"), "<rate>"),
        ]

    def __call__(self, s):
        for k, v in self.literal:
            s = s.replace(k, v)
        for rx, rep in self.rules:
            s = rx.sub(rep, s)
        return s


KEEP = re.compile(r"^\s*shoal\b|error|refus|must|warn|want|cannot|can't|unknown|invalid|not defined|"
                  r"fail|panic|denied|no such|not found|unexpected|usage|flag", re.I)
# hashicorp/memberlist's own log lines (capitalised, "Failed to send gossip",
# "Suspect ...", "Was able to connect ... but UDP probes failed") come and go
# with the timing of its probes: not compared.
MEMBERLIST = re.compile(r'msg="[A-Z][^"]*".*component=membership|component=membership.*msg="[A-Z]')
# Log lines that a run gives or not with the timing of its processes on a
# loaded machine: a sync run's late (backup) worker joining, stall warnings.
TIMING = re.compile(r'msg="joining a run under way"|msg="?stalled')
USAGE = re.compile(r"^\s*Usage\b")


def json_keys(v, prefix=""):
    keys = set()
    if isinstance(v, dict):
        for k, x in v.items():
            name = "#" if re.fullmatch(r"-?\d+", k) else k
            path = prefix + "." + name if prefix else name
            keys.add(path)
            keys |= json_keys(x, path)
    elif isinstance(v, list):
        for x in v:
            keys |= json_keys(x, prefix + "[]")
    return keys


def signature(stream, norm):
    """What of one stream is compared: (exact lines, set of shapes)."""
    lines = [norm(l.rstrip()) for l in stream.splitlines()]
    lines = [l for l in lines if l.strip()]
    if any(USAGE.match(l) for l in lines):
        return ["help> " + l for l in lines], set()
    exact, shapes = [], set()
    for l in lines:
        if MEMBERLIST.search(l) or TIMING.search(l):
            continue
        s = l.strip()
        if s.startswith("{") and s.endswith("}"):
            try:
                v = json.loads(s)
            except ValueError:
                v = None
            if isinstance(v, dict):
                exact.append("json keys> " + " ".join(sorted(json_keys(v))))
                continue
        if KEEP.search(l):
            exact.append(l)
            continue
        shape = re.split(r"\d", l, maxsplit=1)[0].rstrip(" \t:=(,.%-/+")
        shapes.add(re.sub(r"\s+", " ", shape))  # tables' column widths follow their values
    return exact, shapes


def compare(a, b, norm):
    """Returns the differences between runs a and b, as lines."""
    diff = []
    if a[0] != b[0]:
        diff.append("exit: %s != %s" % (a[0], b[0]))
    for i, name in ((1, "stdout"), (2, "stderr")):
        ea, sa = signature(a[i], norm)
        eb, sb = signature(b[i], norm)
        if ea != eb:
            import difflib
            d = list(difflib.unified_diff(ea, eb, "old " + name, "new " + name, n=0, lineterm=""))
            diff.extend(d[:14])
            if len(d) > 14:
                diff.append("... (%d more diff lines)" % (len(d) - 14))
        for s in sorted(sa - sb):
            diff.append("%s: only old has lines like %r" % (name, s))
        for s in sorted(sb - sa):
            diff.append("%s: only new has lines like %r" % (name, s))
    return diff


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit("usage: cli-compare.py OLD_BINARY NEW_BINARY [LIST]")
    old, new = (os.path.abspath(x) for x in args[:2])
    lst = args[2] if len(args) > 2 else os.path.join(HERE, "cli-compare.txt")
    for b in (old, new):
        if not os.access(b, os.X_OK):
            sys.exit("cli-compare: %s is not an executable" % b)
    timeout = int(os.environ.get("CLI_COMPARE_TIMEOUT", "60"))
    only = re.compile(os.environ.get("CLI_COMPARE_FILTER", ""))
    verbose = os.environ.get("CLI_COMPARE_VERBOSE", "") not in ("", "0")
    work = tempfile.mkdtemp(prefix="cli-compare.")
    os.makedirs(os.path.join(work, "bin"))
    norm = Normaliser([old, new], work)
    passed = failed = 0
    start = time.monotonic()
    try:
        for n, cmd in parse_list(lst):
            if not only.search(cmd):
                continue
            a = run_line(cmd, old, work, timeout)
            b = run_line(cmd, new, work, timeout)
            diff = compare(a, b, norm)
            note = ""
            if isinstance(a[0], str) or isinstance(b[0], str):
                note = "  (TIMED OUT)"
            if diff:
                failed += 1
                print("DIFF  %3d  %s  [%.1fs+%.1fs]%s" % (n, cmd, a[3], b[3], note))
                for d in diff:
                    print("        " + d)
            else:
                passed += 1
                print("same  %3d  %s  [%.1fs+%.1fs]%s" % (n, cmd, a[3], b[3], note))
            if verbose:
                for i, name in ((1, "stdout"), (2, "stderr")):
                    e, s = signature(a[i], norm)
                    print("        old %s exit=%s exact=%r shapes=%r" % (name, a[0], e[:6], sorted(s)[:8]))
            sys.stdout.flush()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("# %d lines in %.0fs (%s vs %s)" % (passed + failed, time.monotonic() - start, old, new))
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
