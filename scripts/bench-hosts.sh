#!/usr/bin/env bash
# Fake hosts behind the NIC model (issue 43): the flat ring, the
# hierarchical allreduce and the tree on 2 hosts of 2 and of 4 ranks,
# each host's ranks over shared memory and sharing one modelled NIC of
# $GBPS Gbit/s on the links between hosts; each point $REPEATS times,
# the layouts and algorithms interleaved so that the machine's load
# falls on all of them alike. One JSON object a line on stdout, with
# the layout, the algorithm, the round and the load average added.
#
#   scripts/bench-hosts.sh > hosts.jsonl
#
# Then the link parameters the simulator needs, measured the same way:
# the cross-host hop (2 ranks on 2 hosts, TCP through the NIC) and the
# host's own (2 and 4 ranks on one host, shared memory).
set -euo pipefail
SHOAL=${SHOAL:-./shoal}
GBPS=${GBPS:-1}
REPEATS=${REPEATS:-3}
SIZES=${SIZES:-4KiB,256KiB,16MiB}
ITERS=${ITERS:-10}
load() { cut -d' ' -f1 /proc/loadavg; }
point() { # name np hosts alg [extra...]
	local name=$1 np=$2 hosts=$3 alg=$4
	shift 4
	local l0
	l0=$(load)
	"$SHOAL" bench allreduce --np "$np" --hosts "$hosts" --sizes "$SIZES" --iters "$ITERS" --warmup 2 \
		--allreduce-algorithm "$alg" --json "$@" | while read -r line; do
		echo "${line%\}},\"layout\":\"$name\",\"algorithm\":\"$alg\",\"round\":$r,\"load\":$l0}"
	done
}
for r in $(seq 1 "$REPEATS"); do
	for layout in "2x2 4 2" "2x4 8 2"; do
		set -- $layout
		for alg in ring hierarchical tree; do
			point "$1" "$2" "$3" "$alg" --nic-gbps "$GBPS"
		done
	done
	point link-cross 2 2 ring --nic-gbps "$GBPS"
	point link-host2 2 1 ring
	point link-host4 4 1 ring
done
