#!/bin/bash
# netns.sh - two network namespaces joined by a veth pair, for stress runs
# with a misbehaving network. Everything lives inside namespaces this script
# creates (names prefixed kvb-); nothing touches the host's own interfaces.
#
#   netns.sh up NAME SUBNET        create NAME-s (server, SUBNET.1/30) and NAME-c
#                                  (client, SUBNET.2/30), e.g. up kvb-1234 10.199.7
#   netns.sh netem NAME ARGS...    replace the qdisc on both veth ends with
#                                  "netem ARGS" (e.g. delay 2ms 1ms loss 1% reorder 5%)
#   netns.sh rate NAME RATE        a token-bucket bottleneck (tc tbf, e.g. 20mbit) on both ends,
#                                  50 ms of queue: queueing delay, and drops when it overflows;
#                                  for kernels without netem
#   netns.sh clear NAME            remove netem/tbf from both ends
#   netns.sh down NAME             delete both namespaces (and so the veth pair)
#   netns.sh check                 exit 0 if namespaces and veth work here (root); says
#                                  whether tc netem works too (it needs the kernel's sch_netem)
set -eu

die() { echo "netns.sh: $*" >&2; exit 1; }

name_ok() { case "$1" in kvb-*) ;; *) die "namespace name must start with kvb- (got '$1')" ;; esac; }

up() {
    local n=$1 net=$2
    name_ok "$n"
    [[ "$net" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "SUBNET must be three octets, e.g. 10.199.7"
    ip netns add "$n-s"
    ip netns add "$n-c"
    # Created inside the server namespace, the peer moved to the client's: the
    # pair never exists in the host namespace under a name that could clash.
    ip -n "$n-s" link add veth0 type veth peer name veth1 netns "$n-c"
    ip -n "$n-s" addr add "$net.1/30" dev veth0
    ip -n "$n-c" addr add "$net.2/30" dev veth1
    for side in s c; do
        ip -n "$n-$side" link set lo up
    done
    ip -n "$n-s" link set veth0 up
    ip -n "$n-c" link set veth1 up
}

netem() {
    local n=$1
    shift
    name_ok "$n"
    ip netns exec "$n-s" tc qdisc replace dev veth0 root netem "$@"
    ip netns exec "$n-c" tc qdisc replace dev veth1 root netem "$@"
}

rate() {
    local n=$1 r=$2
    name_ok "$n"
    ip netns exec "$n-s" tc qdisc replace dev veth0 root tbf rate "$r" burst 32kbit latency 50ms
    ip netns exec "$n-c" tc qdisc replace dev veth1 root tbf rate "$r" burst 32kbit latency 50ms
}

clear_netem() {
    local n=$1
    name_ok "$n"
    ip netns exec "$n-s" tc qdisc del dev veth0 root 2>/dev/null || true
    ip netns exec "$n-c" tc qdisc del dev veth1 root 2>/dev/null || true
}

down() {
    local n=$1
    name_ok "$n"
    ip netns del "$n-s" 2>/dev/null || true
    ip netns del "$n-c" 2>/dev/null || true
}

check() {
    [ "$(id -u)" -eq 0 ] || die "needs root"
    if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
        die "needs iproute2 (ip, tc)"
    fi
    local n=kvb-check$$
    trap 'down '"$n" EXIT
    up "$n" 10.199.254
    if netem "$n" delay 1ms 2>/dev/null; then
        echo "netns.sh: namespaces, veth and netem work"
    else
        echo "netns.sh: namespaces and veth work; tc netem does not (no sch_netem in this kernel)"
    fi
}

cmd=${1:-}
shift || true
case "$cmd" in
up) [ $# -eq 2 ] || die "usage: up NAME SUBNET"; up "$@" ;;
netem) [ $# -ge 2 ] || die "usage: netem NAME ARGS..."; netem "$@" ;;
rate) [ $# -eq 2 ] || die "usage: rate NAME RATE"; rate "$@" ;;
clear) [ $# -eq 1 ] || die "usage: clear NAME"; clear_netem "$@" ;;
down) [ $# -eq 1 ] || die "usage: down NAME"; down "$@" ;;
check) check ;;
*) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
