#!/bin/bash
# stress-vm.sh - scripts/stress.sh inside the Debian VM of scripts/rxe-vm.sh,
# for the netem phases: Debian's own kernel has sch_netem, kernels without it
# (as on the machine this was written on) print those phases as NOT RUN.
#
#   scripts/stress-vm.sh            (host, root) boot the VM, run the phases there
#   scripts/stress-vm.sh --guest    (inside the VM) insist on netem, then stress.sh
#
# In the VM: kvstored and kvstress in two network namespaces joined by a veth
# pair with tc netem on both ends (scripts/netns.sh), plus the loopback phases;
# see docs/stress.md. Everything is bounded: PHASE_SECONDS (10) per phase, 8
# phases, and the VM itself by STRESS_VM_TIMEOUT (600 s). KILLS (2) and
# THREADS (4) are smaller than stress.sh's defaults because the VM runs under
# TCG (no KVM): about 2.5 min in all.
#   BUILD=build PHASE_SECONDS=10 KILLS=2 THREADS=4 scripts/stress-vm.sh
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
PHASE_SECONDS=${PHASE_SECONDS:-10}
KILLS=${KILLS:-2}
THREADS=${THREADS:-4}

# Inside the VM: a run without netem would pass while testing nothing this
# script is for, so a missing sch_netem or tc is a failure here.
guest() {
    modprobe sch_netem || {
        echo "stress-vm: no sch_netem module in the VM's kernel" >&2
        exit 1
    }
    command -v tc >/dev/null || {
        echo "stress-vm: no tc (iproute2) in the VM image" >&2
        exit 1
    }
    local check
    check=$("$here/netns.sh" check) || {
        echo "stress-vm: $check" >&2
        exit 1
    }
    echo "$check"
    case $check in
    *"netem work"*) ;;
    *)
        echo "stress-vm: tc netem does not work in the VM" >&2
        exit 1
        ;;
    esac
    echo "stress-vm: kernel $(uname -r), PHASE_SECONDS=$PHASE_SECONDS KILLS=$KILLS THREADS=$THREADS"
    exec env PHASE_SECONDS="$PHASE_SECONDS" KILLS="$KILLS" THREADS="$THREADS" "$here/stress.sh"
}

host() {
    local build=${BUILD:-build}
    [ -x "$build/bin/kvstress" ] || {
        echo "stress-vm: no $build/bin/kvstress (make BUILD=$build first)" >&2
        exit 2
    }
    # The soft-RoCE veth probe of rxe-vm.sh costs time and is not needed here.
    # rxe-vm.sh passes only KVS*/KVBATCH_*/BUILD through, so the knobs go as
    # arguments.
    KVBATCH_RXE_NET=dummy BUILD=$build "$here/rxe-vm.sh" run -t "${STRESS_VM_TIMEOUT:-600}" -- \
        env PHASE_SECONDS="$PHASE_SECONDS" KILLS="$KILLS" THREADS="$THREADS" \
        "$here/stress-vm.sh" --guest
}

case "${1:-}" in
--guest) guest ;;
"") host ;;
*)
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
