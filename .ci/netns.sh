#!/usr/bin/env bash
# Network namespaces for the partition tests (issue 22): `ip` from iproute2
# and root. Idempotent and fast when already there.
set -euo pipefail
if ! command -v ip >/dev/null; then
    apt-get update -q && apt-get install -y -q iproute2
fi
# A bridge and a veth pair must be possible here; say so now rather than
# in the middle of the tests.
ip link del carmi-ci-probe 2>/dev/null || true
ip link add carmi-ci-probe type veth peer name carmi-ci-probe1
ip link del carmi-ci-probe
# Nets left by a killed earlier run (the tests sweep them too).
for d in /tmp/carmi-netns/*/; do
    [[ -d "$d" ]] || continue
    owner=$(cat "$d/owner" 2>/dev/null || true)
    if [[ "$owner" =~ ^[0-9]+$ ]] && ! kill -0 "$owner" 2>/dev/null; then
        k=$(basename "$d")
        for ns in $(ip netns list | awk '{print $1}' | grep -E "^cn${k}h[0-9]+$" || true); do
            pids=$(ip netns pids "$ns" || true)
            [[ -n "$pids" ]] && kill -9 $pids || true
            ip netns del "$ns" || true
        done
        ip link del "cnbr$k" 2>/dev/null || true
        rm -rf "$d"
    fi
done
