#!/bin/bash
# A single-node Slurm cluster on this machine, for testing `weft-run` under
# `srun` (test/e2e/srun.sh; docs/runtime.md, "Running under Slurm"):
#
#   scripts/slurm-local.sh [start]   install, configure and start (idempotent)
#   scripts/slurm-local.sh stop      stop slurmd, slurmctld, munged (by pid file)
#   scripts/slurm-local.sh status    show the daemons and `sinfo`
#
# Must run as root. Made for a container or VM without systemd (Debian 12):
# the daemons are started directly and found again by their pid files.
#
# What `start` does:
#   1. apt-get installs slurmctld, slurmd, slurm-client, munge and
#      libpmix-dev (only what is missing). Debian's slurm-wlm 22.05 ships the
#      PMIx MPI plugin (mpi_pmix.so in slurm-wlm-basic-plugins, built against
#      libpmix2, the PMIx 4.2 that Debian's Open MPI 4.1 uses through its
#      `ext3x` component), so `srun --mpi=pmix` bootstraps Open MPI ranks
#      without mpirun; the plugin dlopens pmix2/lib/libpmix.so, the
#      unversioned link that only libpmix-dev provides.
#   2. Creates /etc/munge/munge.key when absent and starts munged as the
#      `munge` user (socket /run/munge/munge.socket.2).
#   3. Writes /etc/slurm/slurm.conf (only when absent or written by this
#      script: the first line carries a marker; a foreign slurm.conf is left
#      alone and the script stops with an error): one node, this host
#      (`hostname -s`), declared with CPUs=8 and SlurmdParameters=
#      config_overrides so that 2 to 8 tasks fit on a 2-core machine; one
#      partition `debug` (Default, OverSubscribe=YES); select/cons_tres with
#      CR_CPU; proctrack/linuxproc, task/none, jobacct_gather/none (no
#      cgroups); no accounting database; SlurmUser=root; MpiDefault=pmix when
#      the plugin exists (else pmi2, with a warning: Open MPI 4.1 cannot
#      bootstrap from it). Daemon logs and state live under
#      /var/log/slurm-local and /var/spool/slurm-local.
#   4. Starts slurmctld and slurmd (unless their pid files name live
#      processes), then waits until `sinfo` shows the node idle (resuming it
#      if it came up down/drained from an earlier run).
#
# Override the node size with SLURM_LOCAL_CPUS (default 8).
set -euo pipefail

marker="# written by weft scripts/slurm-local.sh"
conf=/etc/slurm/slurm.conf
logdir=/var/log/slurm-local
spool=/var/spool/slurm-local
rundir=/run/slurm-local
ctld_pid=$rundir/slurmctld.pid
slurmd_pid=$rundir/slurmd.pid
munge_pid=/run/munge/munged.pid
cpus=${SLURM_LOCAL_CPUS:-8}
node=$(hostname -s)

die() { echo "slurm-local: error: $*" >&2; exit 1; }
say() { echo "slurm-local: $*"; }

alive() { # PIDFILE NAME: does the pid file name a live (not zombie) NAME?
  local pid stat
  [ -s "$1" ] || return 1
  pid=$(cat "$1")
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] || return 1
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

stop_pid() { # PIDFILE NAME: TERM, wait up to 10 s, then KILL
  local file=$1 name=$2 pid
  if ! alive "$file" "$name"; then
    rm -f "$file"
    return 0
  fi
  pid=$(cat "$file")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do
    alive "$file" "$name" || break
    sleep 0.2
  done
  if alive "$file" "$name"; then
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$file"
  say "stopped $name (pid $pid)"
}

plugin_dir() {
  local d
  for d in /usr/lib/x86_64-linux-gnu/slurm-wlm /usr/lib/*/slurm-wlm \
           /usr/lib/slurm; do
    [ -d "$d" ] && { echo "$d"; return; }
  done
}

install() {
  local need=()
  command -v slurmctld >/dev/null || need+=(slurmctld)
  command -v slurmd >/dev/null || need+=(slurmd)
  command -v srun >/dev/null || need+=(slurm-client)
  command -v munged >/dev/null || need+=(munge)
  # Slurm's mpi/pmix plugin dlopens the unversioned libpmix.so (from
  # libpmix-dev, which libopenmpi-dev pulls in); without it `srun --mpi=pmix`
  # fails with "pmi/pmix: can not load PMIx library".
  [ -e /usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so ] || need+=(libpmix-dev)
  [ ${#need[@]} -eq 0 ] && return 0
  say "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
}

start_munge() {
  mkdir -p /etc/munge /run/munge /var/lib/munge /var/log/munge
  if [ ! -s /etc/munge/munge.key ]; then
    if command -v mungekey >/dev/null; then
      mungekey --create --keyfile /etc/munge/munge.key
    else
      dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null
    fi
  fi
  chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
  chmod 0700 /etc/munge /var/lib/munge /var/log/munge
  chmod 0755 /run/munge
  chmod 0400 /etc/munge/munge.key
  if alive "$munge_pid" munged; then
    return 0
  fi
  rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock
  runuser -u munge -- /usr/sbin/munged --pid-file="$munge_pid"
  for _ in $(seq 1 50); do
    [ -s "$munge_pid" ] && munge -n </dev/null 2>/dev/null |
      unmunge >/dev/null 2>&1 && break
    sleep 0.2
  done
  munge -n </dev/null | unmunge >/dev/null 2>&1 || die "munged does not answer"
  say "munged running (pid $(cat "$munge_pid"))"
}

write_conf() {
  if [ -e "$conf" ] && ! head -n 1 "$conf" | grep -qF "$marker"; then
    die "$conf exists and was not written by this script; not touching it"
  fi
  local mpi=pmi2 plugins
  plugins=$(plugin_dir)
  [ -n "$plugins" ] && [ -e "$plugins/mpi_pmix.so" ] && mpi=pmix
  [ $mpi = pmix ] || echo "slurm-local: warning: no mpi_pmix.so in" \
    "${plugins:-the Slurm plugin directory}: srun cannot start Open MPI ranks" >&2
  mkdir -p /etc/slurm "$logdir" "$spool/ctld" "$spool/d" "$rundir"
  local tmp=$conf.tmp
  cat >"$tmp" <<EOF
$marker (single-node test cluster)
ClusterName=weftlocal
SlurmctldHost=$node
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=$mpi
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
StateSaveLocation=$spool/ctld
SlurmdSpoolDir=$spool/d
SlurmctldPidFile=$ctld_pid
SlurmdPidFile=$slurmd_pid
SlurmctldLogFile=$logdir/slurmctld.log
SlurmdLogFile=$logdir/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=60
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
  if [ -e "$conf" ] && cmp -s "$tmp" "$conf"; then
    rm -f "$tmp"
  else
    mv "$tmp" "$conf"
    say "wrote $conf (MpiDefault=$mpi, $cpus CPUs on $node)"
    # A running controller must re-read it.
    if alive "$ctld_pid" slurmctld; then scontrol reconfigure || true; fi
  fi
}

start_slurm() {
  if ! alive "$ctld_pid" slurmctld; then
    slurmctld -i || die "slurmctld did not start (see $logdir/slurmctld.log)"
  fi
  if ! alive "$slurmd_pid" slurmd; then
    slurmd || die "slurmd did not start (see $logdir/slurmd.log)"
  fi
  local state=""
  for _ in $(seq 1 120); do
    state=$(sinfo -h -n "$node" -o %T 2>/dev/null | head -n 1 || true)
    case $state in
    idle | mixed | allocated) break ;;
    down* | drain*)
      scontrol update NodeName="$node" State=RESUME 2>/dev/null || true ;;
    esac
    sleep 0.5
  done
  case $state in
  idle | mixed | allocated) ;;
  *) die "node $node is '${state:-unknown}' (see $logdir/slurmd.log)" ;;
  esac
  say "slurmctld (pid $(cat "$ctld_pid")) and slurmd (pid $(cat "$slurmd_pid")) running; node $node $state"
}

[ "$(id -u)" = 0 ] || die "must run as root"
case ${1:-start} in
start)
  install
  start_munge
  write_conf
  start_slurm
  sinfo
  ;;
stop)
  stop_pid "$slurmd_pid" slurmd
  stop_pid "$ctld_pid" slurmctld
  stop_pid "$munge_pid" munged
  ;;
status)
  for p in "$munge_pid:munged" "$ctld_pid:slurmctld" "$slurmd_pid:slurmd"; do
    if alive "${p%%:*}" "${p#*:}"; then
      echo "${p#*:}: running (pid $(cat "${p%%:*}"))"
    else
      echo "${p#*:}: stopped"
    fi
  done
  command -v sinfo >/dev/null && { sinfo 2>&1 || true; }
  ;;
*) die "usage: $0 [start|stop|status]" ;;
esac
