#!/usr/bin/env bash
# cli-compare.sh OLD_BINARY NEW_BINARY [LIST]
#
# Runs every command line of LIST (default scripts/cli-compare.txt; one bash
# line each, `shoal` standing for the binary, # comments) with both
# binaries, each in a fresh empty folder, and compares exit codes, error and
# warning messages, help texts, the key sets of --json lines and the shape of
# the other lines (volatile parts normalised: ports, temp paths, durations,
# rates, pids, hex revisions, dates). Prints `same` or `DIFF` per line, then
# `N passed, M failed`; exits 1 if any line differs.
#
#   go build -o /tmp/cmp/old ./cmd/shoal    # at the old commit
#   go build -o /tmp/cmp/new ./cmd/shoal    # at the new one
#   scripts/cli-compare.sh /tmp/cmp/old /tmp/cmp/new
#
# Environment: CLI_COMPARE_TIMEOUT (seconds a line may run, per binary;
# default 60), CLI_COMPARE_FILTER (a Python regexp: run only the lines it
# matches), CLI_COMPARE_VERBOSE=1 (print what was compared of each line).
# Some lines read Fashion-MNIST from /usr/share/datasets/fashion-mnist
# (scripts/ensure-dataset.sh installs it); without it they compare the error.
set -euo pipefail
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
	sed -n '2,20s/^# \{0,1\}//p' "$0" >&2
	exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
exec /usr/bin/python3 "$here/cli-compare.py" "$@"
