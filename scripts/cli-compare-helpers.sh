# Sourced by scripts/cli-compare.py into the bash that runs each line of
# scripts/cli-compare.txt (cwd: the line's own empty folder; `shoal` on PATH
# is the binary under test). Helpers for lines that need a running server.

# serve ARGS...: starts `shoal ARGS` in the background (its output into
# serve-N.out/.err), waits until it logs that it serves, and appends its
# address to $ADDRS (comma-separated; $ADDR is the last one) and its gossip
# address, if any, to $GOSSIP. Returns 1 if it is not serving within 30s.
SERVE_N=0
SERVE_PIDS=()
ADDRS=
GOSSIP=
serve() {
	local n=$SERVE_N
	SERVE_N=$((SERVE_N + 1))
	shoal "$@" >"serve-$n.out" 2>"serve-$n.err" </dev/null &
	SERVE_PIDS+=($!)
	local i line
	for i in $(seq 300); do
		line=$(grep -m1 'msg=serving' "serve-$n.err" 2>/dev/null)
		if [ -n "$line" ]; then
			ADDR=$(sed -n 's/.* addr=\([^ ]*\).*/\1/p' <<<"$line")
			ADDRS=${ADDRS:+$ADDRS,}$ADDR
			local g
			g=$(sed -n 's/.* gossip=\([0-9.:]*[0-9]\).*/\1/p' <<<"$line")
			[ -n "$g" ] && GOSSIP=$g
			return 0
		fi
		kill -0 "${SERVE_PIDS[-1]}" 2>/dev/null || break
		sleep 0.1
	done
	echo "serve: error: shoal $* did not serve" >&2
	return 1
}

# stop: interrupts every server serve started (SIGINT: they drain and exit),
# waits for them, prints their output (stdout, then stderr to stderr) and
# returns the last non-zero exit status among them.
stop() {
	local rc=0 pid s n=0
	for pid in "${SERVE_PIDS[@]}"; do
		kill -INT "$pid" 2>/dev/null
	done
	for pid in "${SERVE_PIDS[@]}"; do
		wait "$pid"
		s=$?
		[ $s -ne 0 ] && rc=$s
	done
	while [ $n -lt $SERVE_N ]; do
		cat "serve-$n.out"
		cat "serve-$n.err" >&2
		n=$((n + 1))
	done
	SERVE_PIDS=()
	return $rc
}

# freeport: prints a free loopback TCP port.
freeport() {
	/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# gossipkey [FILE]: writes the README tests' 32-byte gossip key, mode 0600.
gossipkey() {
	(umask 077 && printf 0123456789abcdef0123456789abcdef >"${1:-gossip.key}")
}
