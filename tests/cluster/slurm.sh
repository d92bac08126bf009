#!/usr/bin/env bash
# A one-node SLURM cluster on this Debian machine (this host, all its CPUs), for the cluster tests
# (tests/test_slurm.py) and for trying the SLURM launcher by hand. As root:
#   tests/cluster/slurm.sh start    # install slurm-wlm and munge if missing, configure, start, wait for the node
#   tests/cluster/slurm.sh stop     # stop slurmd, slurmctld and munged
#   tests/cluster/slurm.sh status   # exit 0 when the node answers idle or busy
# `start` is idempotent (a running cluster is left as it is) and takes seconds. The cluster has no
# accounting database: `sacct` answers from the controller's job table (tests/cluster/bin/sacct), which is
# what submitit polls for the state of a job that ended without a result (cancelled, killed).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
STATE=${REPRO_SLURM_STATE:-/var/lib/vitrepro-slurm}
CONF=/etc/slurm/slurm.conf
HOST=$(hostname -s)

say() { echo "slurm.sh: $*" >&2; }

install() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null && return
  [ "$(id -u)" = 0 ] || { say "slurm-wlm and munge are missing and installing them needs root"; exit 1; }
  say "installing slurm-wlm and munge (apt)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    slurm-wlm munge) >/dev/null
}

configure() {
  mkdir -p "$STATE"/{ctld,spool,log} /etc/slurm /run/munge
  chown munge:munge /run/munge
  if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=128 count=1 status=none
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
  fi
  local mem; mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
  cat >"$CONF.tmp" <<EOF
# Written by tests/cluster/slurm.sh: a one-node test cluster, tuned to start jobs at once.
ClusterName=vitrepro
SlurmctldHost=$HOST
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
KillWait=5
MinJobAge=600
InactiveLimit=0
MessageTimeout=10
SlurmdTimeout=60
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  if ! cmp -s "$CONF.tmp" "$CONF"; then mv "$CONF.tmp" "$CONF"; else rm "$CONF.tmp"; fi
}

running() { [ -f "$1" ] && kill -0 "$(cat "$1" 2>/dev/null)" 2>/dev/null; }

node_up() { sinfo -h -N -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)'; }

start() {
  install
  configure
  running /run/munge/munged.pid || runuser -u munge -- munged
  running "$STATE/slurmctld.pid" || slurmctld
  running "$STATE/slurmd.pid" || slurmd
  for _ in $(seq 1 120); do
    if node_up; then
      say "up: node $HOST, $(nproc) CPUs, partition debug (logs in $STATE/log)"
      return
    fi
    sleep 0.5
  done
  sinfo -N >&2 || true
  tail -n 20 "$STATE"/log/*.log >&2 || true
  say "the node did not come up within 60 s"
  exit 1
}

stop() {
  local pidfile
  for pidfile in "$STATE/slurmd.pid" "$STATE/slurmctld.pid" /run/munge/munged.pid; do
    if running "$pidfile"; then
      kill "$(cat "$pidfile")"
      for _ in $(seq 1 50); do running "$pidfile" || break; sleep 0.2; done
    fi
  done
  say "stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) node_up ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
