#!/bin/bash
# A real one-host Slurm cluster for deploy's TestRealSlurm: munged,
# slurmctld and two slurmd (slurmd -N), all on loopback, every file under
# one folder.
#
#   minicluster.sh up DIR     start it; prints SLURM_CONF=DIR/slurm.conf
#   minicluster.sh down DIR   stop what `up` started (by the pid files)
#
# The two nodes are named after two names that resolve to a loopback
# address, LOCALHOST and this host's name, because the recipe gives the
# shards' and the rendezvous' addresses as node names. Not "localhost":
# Slurm takes that node name for this host's name, and two nodes of one
# name fail ("Duplicated NodeHostName"). Needs root (SlurmUser
# root, munged --force) and Debian's slurm-wlm and munge. Exit 3: this host
# cannot run it (what is missing is said on stderr).
set -euo pipefail

cmd=${1:?usage: minicluster.sh up|down DIR}
dir=${2:?usage: minicluster.sh up|down DIR}

stop() {
	local f pid
	for f in "$dir"/slurmd-*.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
		[[ -f $f ]] || continue
		pid=$(<"$f")
		[[ -n $pid ]] && kill -TERM "$pid" 2>/dev/null || true
	done
	# Wait (bounded) for them to go, then make sure.
	for _ in $(seq 50); do
		local alive=0
		for f in "$dir"/slurmd-*.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
			[[ -f $f ]] || continue
			pid=$(<"$f")
			[[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && alive=1
		done
		((alive)) || return 0
		sleep 0.1
	done
	for f in "$dir"/slurmd-*.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
		[[ -f $f ]] || continue
		pid=$(<"$f")
		[[ -n $pid ]] && kill -KILL "$pid" 2>/dev/null || true
	done
}

if [[ $cmd == down ]]; then
	stop
	exit 0
fi
[[ $cmd == up ]] || { echo "minicluster.sh: $cmd: want up or down" >&2; exit 2; }

missing=()
for p in munged slurmctld slurmd sbatch squeue scancel scontrol; do
	command -v "$p" >/dev/null || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "minicluster.sh: not installed: ${missing[*]} (apt-get install slurm-wlm munge)" >&2
	exit 3
fi
if (($(id -u) != 0)); then
	echo "minicluster.sh: needs root (SlurmUser=root)" >&2
	exit 3
fi
host=$(hostname)
node1=LOCALHOST
node2=$host
if [[ $node2 == localhost ]] || ! getent hosts "$node2" | grep -qE '^(127\.|::1)'; then
	echo "minicluster.sh: this host's name ($host) does not resolve to a loopback address: no second node name" >&2
	exit 3
fi

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
		echo $((20000 + RANDOM % 20000))
}
ctl_port=$(free_port)
d1_port=$(free_port)
d2_port=$(free_port)

mkdir -p "$dir/state" "$dir/spool"
chmod 755 "$dir"
dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge.key"
munged --force --key-file="$dir/munge.key" --socket="$dir/munge.sock" \
	--pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munged.seed"

cat >"$dir/slurm.conf" <<CONF
ClusterName=shoaltest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctl_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=30
InactiveLimit=0
MinJobAge=300
NodeName=$node1 NodeAddr=127.0.0.1 Port=$d1_port CPUs=4 State=UNKNOWN
NodeName=$node2 NodeAddr=127.0.0.1 Port=$d2_port CPUs=4 State=UNKNOWN
PartitionName=test Nodes=$node1,$node2 Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$dir/slurm.conf

slurmctld -i -f "$dir/slurm.conf"
slurmd -N "$node1" -f "$dir/slurm.conf"
slurmd -N "$node2" -f "$dir/slurm.conf"

# Up when both nodes are idle (bounded: 30 s).
for _ in $(seq 300); do
	if [[ $(sinfo -h -o '%T' -N 2>/dev/null | grep -c '^idle') == 2 ]]; then
		echo "SLURM_CONF=$dir/slurm.conf"
		exit 0
	fi
	sleep 0.1
done
echo "minicluster.sh: the nodes did not come up:" >&2
sinfo -N >&2 || true
tail -n 20 "$dir"/slurmctld.log "$dir"/slurmd-*.log >&2 || true
stop
exit 1
