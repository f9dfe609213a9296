#!/bin/sh
# deps.sh SET - make sure the Debian packages SET needs are installed.
# As root it installs what is missing with apt-get; otherwise it prints the
# one apt-get line to run and fails. SET: build, test, bench, rdma.
set -eu

build="gcc make pkg-config libibverbs-dev librdmacm-dev uthash-dev libcmocka-dev python3-dev libsodium-dev"
test="$build clang libclang-rt-14-dev valgrind iproute2 prometheus prometheus-node-exporter procps cppcheck clang-tidy clang-format"
bench="$build redis-server redis-tools iperf3 gnuplot-nox"
rdma="$build qemu-system-x86 debootstrap e2fsprogs"

case "${1:-build}" in
build) want=$build ;;
test) want=$test ;;
bench) want=$bench ;;
rdma) want=$rdma ;;
*) echo "deps.sh: unknown set '$1' (build, test, bench, rdma)" >&2; exit 2 ;;
esac

missing=
for p in $want; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing="$missing $p"
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "kvbatch needs these Debian packages; run as root:" >&2
    echo "  apt-get install -y --no-install-recommends$missing" >&2
    exit 1
fi
echo "deps.sh: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
for i in 1 2 3; do
    apt-get -o DPkg::Lock::Timeout=600 update -qq && break
    sleep 5
done
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends $missing >/dev/null
