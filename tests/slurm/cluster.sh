#!/usr/bin/env bash
# A single-node Slurm cluster on this machine, for the Slurm tests (tests/test_slurm_cluster.py) and CI.
#
#   tests/slurm/cluster.sh install   apt-get install slurm-wlm munge (root; no-op when installed)
#   tests/slurm/cluster.sh start     write the config, start munged, slurmctld, slurmd; wait for the node
#   tests/slurm/cluster.sh stop      cancel its jobs, stop the three daemons (pid files); keeps the state folder
#   tests/slurm/cluster.sh status    daemons and sinfo
#
# Everything (config, munge key and socket, spool, state, logs, pid files) lives in a private folder,
# $ATTNSIM_SLURM_DIR (default /tmp/attnsim-slurm); nothing under /etc is touched and no systemd is needed.
# Clients find the cluster with SLURM_CONF=$ATTNSIM_SLURM_DIR/etc/slurm.conf (start prints that line).
# Ports: $ATTNSIM_SLURM_CTLD_PORT (6817) and $ATTNSIM_SLURM_D_PORT (6818). CPUs: nproc. Every step is
# idempotent: start on a running cluster only waits for the node, stop on a stopped one does nothing.
set -euo pipefail

DIR=${ATTNSIM_SLURM_DIR:-/tmp/attnsim-slurm}
CTLD_PORT=${ATTNSIM_SLURM_CTLD_PORT:-6817}
D_PORT=${ATTNSIM_SLURM_D_PORT:-6818}
WAIT_S=${ATTNSIM_SLURM_WAIT_S:-60}
NODE=$(hostname -s)
CONF=$DIR/etc/slurm.conf
PKGS="slurm-wlm munge"
export SLURM_CONF=$CONF
export PATH=$PATH:/usr/sbin:/sbin  # the daemons live in sbin

die() { echo "cluster.sh: $*" >&2; exit 1; }
have_slurm() { command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
               && command -v munged >/dev/null; }
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

install() {
    if have_slurm; then echo "slurm and munge are installed"; return; fi
    [ "$(id -u)" = 0 ] || die "slurm-wlm and munge are missing; install them as root: apt-get install -y $PKGS"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -y -q install $PKGS >/dev/null || { apt-get -q update >/dev/null && apt-get -y -q install $PKGS >/dev/null; }
    have_slurm || die "apt-get install $PKGS did not provide slurmctld, slurmd, sbatch and munged"
}

write_config() {
    mkdir -p "$DIR"/{etc,munge,log,run,ctld,spool}
    chmod 755 "$DIR/munge"  # munged wants its socket folder searchable by all
    [ -s "$DIR/munge/munge.key" ] || { head -c 1024 /dev/urandom > "$DIR/munge/munge.key"; chmod 400 "$DIR/munge/munge.key"; }
    local cpus mem_mb
    cpus=$(nproc)
    mem_mb=$(( $(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 ))
    cat > "$CONF" <<CONF
# written by tests/slurm/cluster.sh: one node ($NODE, $cpus CPUs), daemons run as $(id -un)
ClusterName=attnsim-test
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=$(id -un)
SlurmdUser=$(id -un)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$D_PORT
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket.2
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# no cgroups (containers rarely delegate them): processes tracked by process group, no task binding. Not
# proctrack/linuxproc: it finds a job's processes through their parent links, so a job step whose shell died
# on scancel's SIGTERM left its child (a dask worker hung in its close) re-parented to init and never killed.
# KillWait: SIGKILL 5 s after that SIGTERM (default 30 s), as a cgroup-tracking cluster does
ProctrackType=proctrack/pgid
KillWait=5
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
MinJobAge=600
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
CONF
    # cgroup.conf is read by slurmd even without cgroup plugins; say so explicitly
    cat > "$DIR/etc/cgroup.conf" <<CONF
CgroupAutomount=no
ConstrainCores=no
ConstrainRAMSpace=no
CONF
}

start() {
    have_slurm || die "slurm-wlm and munge are missing; run: $0 install (as root), or apt-get install -y $PKGS"
    local sock=$DIR/munge/munge.socket.2
    (( ${#sock} < 100 )) || die "state folder too long for a Unix socket path ($sock); set ATTNSIM_SLURM_DIR shorter"
    write_config
    if ! alive "$DIR/run/munged.pid"; then
        munged --force --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket.2" \
            --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed" \
            </dev/null >>"$DIR/log/daemons.out" 2>&1 || die "munged did not start (see $DIR/log/munged.log, daemons.out)"
    fi
    # daemons fork into the background (pid files above); their stdio never holds the caller's pipes
    alive "$DIR/run/slurmctld.pid" || slurmctld -f "$CONF" </dev/null >>"$DIR/log/daemons.out" 2>&1 \
        || die "slurmctld did not start (see $DIR/log/slurmctld.log, daemons.out)"
    alive "$DIR/run/slurmd.pid" || slurmd -f "$CONF" -N "$NODE" </dev/null >>"$DIR/log/daemons.out" 2>&1 \
        || die "slurmd did not start (see $DIR/log/slurmd.log, daemons.out)"
    local t0=$SECONDS state=""
    while (( SECONDS - t0 < WAIT_S )); do
        state=$(sinfo -h -n "$NODE" -o %T 2>/dev/null || true)
        case "$state" in idle|mixed|allocated) echo "SLURM_CONF=$CONF"; return ;; esac
        sleep 0.5
    done
    die "node $NODE not idle after ${WAIT_S} s (sinfo says '${state:-no answer}'; logs in $DIR/log)"
}

terminate() {  # SIGTERM the named daemons (pid files), wait for them (bounded), SIGKILL what is left
    local name pids=() pid t0=$SECONDS
    for name in "$@"; do alive "$DIR/run/$name.pid" && pids+=("$(cat "$DIR/run/$name.pid")"); done
    (( ${#pids[@]} )) || return 0
    kill "${pids[@]}" 2>/dev/null || true
    for pid in "${pids[@]}"; do
        while kill -0 "$pid" 2>/dev/null; do
            (( SECONDS - t0 < 20 )) || { kill -9 "$pid" 2>/dev/null || true; break; }
            sleep 0.1
        done
    done
}

stop() {
    local t0
    if alive "$DIR/run/slurmctld.pid"; then  # jobs of this private cluster first (no stray slurmstepd)
        scancel --quiet --user="$(id -un)" 2>/dev/null || true
        t0=$SECONDS
        while [ -n "$(squeue -h -o %i 2>/dev/null)" ] && (( SECONDS - t0 < 10 )); do sleep 0.2; done
    fi
    terminate slurmctld slurmd munged  # together: ~2 s (one at a time, slurmd first: ~8 s)
    rm -f "$DIR"/run/*.pid
}

status() {
    local name
    for name in munged slurmctld slurmd; do
        if alive "$DIR/run/$name.pid"; then echo "$name: running (pid $(cat "$DIR/run/$name.pid"))"; else echo "$name: stopped"; fi
    done
    alive "$DIR/run/slurmctld.pid" && sinfo
    return 0
}

case "${1:-}" in
    install|start|stop|status) "$1" ;;
    *) die "usage: $0 install|start|stop|status" ;;
esac
