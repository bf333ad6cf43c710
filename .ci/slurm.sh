#!/usr/bin/env bash
# A one-node Slurm cluster for the pilot tests (issue "Pilots from Slurm"):
# installs Debian's slurmctld, slurmd, slurm-client and munge if missing,
# writes /etc/slurm/slurm.conf for this host, starts munged, slurmctld and
# slurmd as plain daemons (CI has no systemd) and waits until `sinfo` shows
# the node idle. Idempotent: a second run finds everything up and returns.
set -euo pipefail

need=()
for cmd in slurmctld slurmd sbatch munged; do
    command -v "$cmd" >/dev/null 2>&1 || need+=("$cmd")
done
if ((${#need[@]})); then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q slurmctld slurmd slurm-client munge
fi

host=$(hostname -s)
spool=/var/spool/carmi-slurm
mkdir -p /etc/slurm "$spool/ctld" "$spool/d" /var/log/carmi-slurm /run/munge /var/lib/munge /var/log/munge
conf=/etc/slurm/slurm.conf
# The node declares 8 CPUs whatever the machine has (config_overrides): the
# tests run several one-CPU pilots at once on a small CI machine.
want=$(cat <<CONF
# Written by .ci/slurm.sh: a one-node test cluster.
ClusterName=carmi-ci
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$spool/ctld
SlurmdSpoolDir=$spool/d
SlurmctldPidFile=/run/carmi-slurmctld.pid
SlurmdPidFile=/run/carmi-slurmd.pid
SlurmctldLogFile=/var/log/carmi-slurm/slurmctld.log
SlurmdLogFile=/var/log/carmi-slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=30
KillWait=5
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
MpiDefault=none
NodeName=$host CPUs=8 RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=60 State=UP
CONF
)
if [[ ! -f $conf ]] || [[ "$(cat "$conf")" != "$want" ]]; then
    printf '%s\n' "$want" >"$conf"
    changed=1
else
    changed=0
fi

if [[ ! -s /etc/munge/munge.key ]]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
chmod 0400 /etc/munge/munge.key
chmod 0700 /etc/munge

running() { pgrep -x "$1" >/dev/null 2>&1; }

if ! running munged; then
    if id munge >/dev/null 2>&1; then
        runuser -u munge -- /usr/sbin/munged
    else
        /usr/sbin/munged --force
    fi
fi
for _ in $(seq 50); do
    munge -n </dev/null | unmunge >/dev/null 2>&1 && break
    sleep 0.2
done
munge -n </dev/null | unmunge >/dev/null || { echo "slurm.sh: munged does not answer" >&2; exit 1; }

if ((changed)) && running slurmctld; then
    scontrol reconfigure || true
fi
running slurmctld || /usr/sbin/slurmctld
running slurmd || /usr/sbin/slurmd

# Bounded wait for the node to be idle (or mixed: jobs of an earlier run).
for _ in $(seq 60); do
    state=$(sinfo -h -N -n "$host" -o %t 2>/dev/null | head -1 || true)
    case "$state" in
        idle|mix|alloc) break ;;
        down*|drain*|inval*)
            scontrol update NodeName="$host" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    sleep 1
done
state=$(sinfo -h -N -n "$host" -o %t 2>/dev/null | head -1 || true)
case "$state" in
    idle|mix|alloc) echo "slurm.sh: node $host is $state" ;;
    *)
        echo "slurm.sh: node $host did not become idle within 60 s (state '${state:-none}')" >&2
        sinfo -N -l >&2 || true
        tail -n 20 /var/log/carmi-slurm/slurmctld.log /var/log/carmi-slurm/slurmd.log >&2 || true
        exit 1 ;;
esac
