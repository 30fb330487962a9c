#!/usr/bin/env bash
# The modes side by side across containers: each worker and shard in its
# own network namespace on the docker-compose network, not processes on
# loopback. Per round, alternating: docker-compose up in sync, async and
# SSP (docker-compose.yml: 2 shards, 4 workers) and ring
# (docker-compose.ring.yml: 4 ranks), each on a fresh project that is
# removed afterwards (down -v). From each run's log: every worker's
# samples over the longest worker's time (the "worker N of 4: ... samples
# in T s" lines), and worker 0's test accuracy. Writes the medians over
# the rounds into docs/BENCHMARKS.md between <!-- cluster:begin --> and
# <!-- cluster:end --> and prints them.
#
# Knobs (environment): BENCH_CLUSTER_ROUNDS (2), BENCH_CLUSTER_EPOCHS (3),
# BENCH_CLUSTER_MODES ("sync async ssp ring"), SHOAL_HIDDEN etc. as
# docker-compose.yml documents them, SHOAL_IMAGE (shoal:latest; make
# images builds it), DOC (docs/BENCHMARKS.md), PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-/usr/bin/python3}
ROUNDS=${BENCH_CLUSTER_ROUNDS:-2}
MODES=${BENCH_CLUSTER_MODES:-sync async ssp ring}
export SHOAL_EPOCHS=${BENCH_CLUSTER_EPOCHS:-3}
export SHOAL_IMAGE=${SHOAL_IMAGE:-shoal:latest}
DOC=${DOC:-docs/BENCHMARKS.md}
command -v docker-compose >/dev/null || { echo "bench-cluster: docker-compose is not installed" >&2; exit 1; }
docker image inspect "$SHOAL_IMAGE" >/dev/null 2>&1 || { echo "bench-cluster: no image $SHOAL_IMAGE: run make images first" >&2; exit 1; }
[ -f "$DOC" ] || { echo "bench-cluster: $DOC not found" >&2; exit 1; }

out=$(mktemp -d)
project=shoalbench$$
file=docker-compose.yml
cleanup() { docker-compose -p "$project" -f "$file" down -v -t 1 >/dev/null 2>&1 || true; rm -rf "$out"; }
trap cleanup EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq "$ROUNDS"); do
	for mode in $MODES; do
		file=docker-compose.yml
		[ "$mode" = ring ] && file=docker-compose.ring.yml
		echo "bench-cluster: round $round, $mode" >&2
		SHOAL_MODE=$mode docker-compose -p "$project" -f "$file" up --no-color >"$out/$mode-$round.log" 2>&1 ||
			{ echo "bench-cluster: docker-compose up ($mode) failed:" >&2; tail -20 "$out/$mode-$round.log" >&2; exit 1; }
		docker-compose -p "$project" -f "$file" down -v -t 1 >/dev/null 2>&1
	done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

cmd="make bench-cluster (BENCH_CLUSTER_ROUNDS=$ROUNDS BENCH_CLUSTER_EPOCHS=$SHOAL_EPOCHS)"
"$PY" - "$out" "$cmd" "$DOC" "$load_before" "$load_after" "$ROUNDS" "$MODES" "${SHOAL_HIDDEN:-256,128}" "${SHOAL_BATCH:-64}" <<'EOF'
import datetime, re, statistics, sys

sys.path.insert(0, "scripts")
from benchdoc import machine, put_section, revision

folder, command, doc, load_before, load_after, rounds, modes, hidden, batch = sys.argv[1:10]
done = re.compile(r"\| (?:worker|rank) (\d+) of (\d+): (\d+) steps, (\d+) samples in ([0-9.]+)s")
acc = re.compile(r"worker0_1 +\| test: loss [0-9.]+, accuracy ([0-9.]+)%")
rows = []
for mode in modes.split():
    speeds, accs = [], []
    for r in range(1, int(rounds) + 1):
        with open(f"{folder}/{mode}-{r}.log") as f:
            log = f.read()
        ws = done.findall(log)
        a = acc.search(log)
        if len(ws) != int(ws[0][1]) or a is None:
            sys.exit(f"bench-cluster: {mode} round {r}: {len(ws)} workers reported, accuracy {a}:\n{log[-3000:]}")
        speeds.append(sum(int(w[3]) for w in ws) / max(float(w[4]) for w in ws))
        accs.append(float(a.group(1)))
    rows.append(f"| {mode} | {statistics.median(speeds):,.0f} | {statistics.median(accs):.2f}% | "
                + ", ".join(f"{s:,.0f}" for s in speeds) + " |")
table = "\n".join([
    f"Command: `{command}` at revision {revision()}, {datetime.date.today()}.",
    f"Machine: {machine()}; load average {load_before} before, {load_after} after.",
    f"4 workers (PS modes: 2 shards), MLP 784-{hidden.replace(',', '-')}-10, batch {batch} per worker, "
    "each worker and shard in its own container on one docker-compose bridge network; the modes alternate, "
    "one run each per round, medians over the rounds. samples/s: every worker's samples over the longest "
    "worker's training time.",
    "",
    "| mode | samples/s | test accuracy | rounds (samples/s) |",
    "|---|---|---|---|",
    *rows,
])
put_section(doc, "cluster", table, "The modes across containers (docker-compose)")
print(table)
EOF
