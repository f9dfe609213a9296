#!/bin/bash
# rxe-vm.sh - real RDMA verbs (soft-RoCE) for a machine without any: a small
# Debian VM under qemu that loads rdma_rxe and runs one command.
#
#   scripts/rxe-vm.sh image               build the cached VM image if needed
#   scripts/rxe-vm.sh run [-t SECS] -- CMD [ARGS...]
#                                         boot the VM, run CMD, print its output,
#                                         exit with its status
#   scripts/rxe-vm.sh clean               remove the cache
#
# The cache ($KVBATCH_RXE_CACHE, default /var/cache/kvbatch-rxe) holds a raw
# ext4 image built with debootstrap from the host's own apt mirror, Debian's
# 6.1 kernel and a small MODULES=list initramfs. The image is booted with
# snapshot=on, so it stays pristine; each run gets a fresh control directory
# shared over 9p (run script in, exit status out).
#
# Inside the VM: no NIC (-nodefaults), the source tree (this repository) is
# shared over 9p at the same absolute path, rdma_rxe/ib_uverbs/rdma_ucm are
# loaded, and two soft-RoCE devices are made on a veth pair whose ends reach
# each other through policy routing (a single dummy netdev if that fails).
# CMD sees KVS_RDMA_ADDR_A / KVS_RDMA_ADDR_B (the two ends' IPv4 addresses),
# KVS_RDMA_DEV_A / KVS_RDMA_DEV_B (device names) and KVS_RXE_NET (veth or
# dummy), runs from the caller's working directory, with `ulimit -l
# unlimited`. Variables named KVS*, KVSTORE_*, KVBATCH_*, BUILD, SAN, TESTS,
# TEST_TIMEOUT, REPEAT (rxe-bench) and RDMA_SKIP_TESTS (rxe-tests) are passed
# through.
#
# Root is required (debootstrap, chroot). Output comes back on a
# virtio-serial port (the emulated 16550 is far too slow), the exit status
# through the 9p control share. The whole run is bounded by -t SECS
# (default $KVBATCH_RXE_TIMEOUT or 900). KVBATCH_RXE_NET=dummy skips the veth
# pair.
set -euo pipefail

CACHE=${KVBATCH_RXE_CACHE:-/var/cache/kvbatch-rxe}
TIMEOUT=${KVBATCH_RXE_TIMEOUT:-900}
SUITE=bookworm
# Bump when the image recipe changes: a stale cache is rebuilt.
IMAGE_RECIPE=5
PACKAGES="rdma-core,ibverbs-providers,ibverbs-utils,rdmacm-utils,perftest,iproute2,kmod,procps,\
initramfs-tools,linux-base,libibverbs1,librdmacm1,libcmocka0,libsodium23,util-linux"
IMAGE_SIZE=2G
# Addresses of the two soft-RoCE ends. TEST-NET-1 (RFC 5737): reserved for
# documentation, routed nowhere; the VM has no NIC anyway, so no packet
# ever leaves it.
ADDR_A=192.0.2.1
ADDR_B=192.0.2.2

SRC=$(cd "$(dirname "$0")/.." && pwd)

log() { echo "rxe-vm: $*" >&2; }
die() {
    log "$*"
    exit 2
}

# The first mirror the host's own apt uses for the suite's main component.
host_mirror() {
    apt-get indextargets --format '$(SITE) $(RELEASE) $(COMPONENT)' 'Identifier: Packages' |
        awk -v s="$SUITE" '$2 == s && $3 == "main" { print $1; exit }'
}

image_ok() {
    [ -f "$CACHE/stamp" ] && [ "$(cat "$CACHE/stamp")" = "$IMAGE_RECIPE $PACKAGES" ] &&
        [ -f "$CACHE/image.ext4" ] && [ -f "$CACHE/vmlinuz" ] && [ -f "$CACHE/initrd.img" ]
}

# The guest's /sbin/init: mounts the basics and the 9p control share, runs
# the per-run script from it, then powers off. The run logic lives in the
# control share, so changing it never rebuilds the image.
write_guest_init() {
    cat >"$1/sbin/kvs-init" <<'EOF'
#!/bin/sh
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sys /sys
mountpoint -q /dev || mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
modprobe -a 9p 9pnet_virtio virtio_console 2>/dev/null
mkdir -p /kvsctl
if mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 kvsctl /kvsctl; then
    /bin/sh /kvsctl/run.sh
else
    echo "kvs-init: cannot mount the control share" >&2
fi
sync
echo 1 >/proc/sys/kernel/sysrq
echo o >/proc/sysrq-trigger
sleep 10
EOF
    chmod 755 "$1/sbin/kvs-init"
}

build_image() {
    local mirror root kpkg
    mirror=$(host_mirror)
    [ -n "$mirror" ] || die "no '$SUITE main' source in the host's apt configuration"
    command -v debootstrap >/dev/null || die "debootstrap is missing (scripts/deps.sh rdma)"
    command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86 is missing (scripts/deps.sh rdma)"
    mkdir -p "$CACHE"
    root="$CACHE/rootfs"
    rm -rf "$root" "$CACHE/image.ext4" "$CACHE/stamp"
    log "debootstrap $SUITE (minbase) into $root"
    debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$root" "$mirror" \
        >"$CACHE/debootstrap.log" 2>&1 || {
        tail -20 "$CACHE/debootstrap.log" >&2
        die "debootstrap failed (log: $CACHE/debootstrap.log)"
    }

    # A small initramfs: only what mounts a virtio ext4 root. Debian's
    # default (MODULES=most) takes over a minute and 35 MB.
    echo MODULES=list >"$root/etc/initramfs-tools/conf.d/kvbatch-rxe"
    mkdir -p "$root/usr/share/initramfs-tools/modules.d"
    printf '%s\n' virtio_pci virtio_blk ext4 >"$root/usr/share/initramfs-tools/modules.d/kvbatch-rxe"

    log "installing the kernel"
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    mount -t proc proc "$root/proc"
    trap 'umount "$root/proc" 2>/dev/null || true' EXIT
    kpkg=$(chroot "$root" apt-cache depends linux-image-amd64 |
        awk '/Depends: linux-image-6\.1/ { print $2; exit }')
    [ -n "$kpkg" ] || die "cannot tell which linux-image-6.1 package linux-image-amd64 wants"
    (cd "$root/tmp" && chroot "$root" sh -c "cd /tmp && apt-get -q download $kpkg") \
        >>"$CACHE/debootstrap.log" 2>&1 || die "apt-get download $kpkg failed"
    chroot "$root" sh -c 'dpkg -i /tmp/linux-image-*.deb' >>"$CACHE/debootstrap.log" 2>&1 ||
        die "installing $kpkg failed (log: $CACHE/debootstrap.log)"
    rm -f "$root"/tmp/*.deb
    umount "$root/proc"
    trap - EXIT
    find "$root/lib/modules" -name 'rdma_rxe.ko*' | grep -q . || die "no rdma_rxe module in $kpkg"

    cp "$root"/boot/vmlinuz-* "$CACHE/vmlinuz"
    cp "$root"/boot/initrd.img-* "$CACHE/initrd.img"
    write_guest_init "$root"
    echo kvbatch-rxe >"$root/etc/hostname"
    printf '127.0.0.1 localhost kvbatch-rxe\n' >"$root/etc/hosts"
    : >"$root/etc/resolv.conf"
    # Nothing but the kernel image needs the apt caches inside the VM.
    apt-get -q clean -o Dir="$root" 2>/dev/null || true
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*_Packages

    log "making the ext4 image"
    mke2fs -q -F -t ext4 -L kvbatch-rxe -d "$root" "$CACHE/image.ext4.tmp" "$IMAGE_SIZE"
    mv "$CACHE/image.ext4.tmp" "$CACHE/image.ext4"
    rm -rf "$root"
    echo "$IMAGE_RECIPE $PACKAGES" >"$CACHE/stamp"
    log "image ready in $CACHE"
}

# Builds the image unless a current one is cached; one builder at a time.
ensure_image() {
    [ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap, chroot)"
    mkdir -p "$CACHE"
    exec 9>"$CACHE/.lock"
    flock 9
    if ! image_ok; then
        local t0=$SECONDS
        build_image
        log "image built in $((SECONDS - t0)) s"
    fi
    flock -u 9
}

# The per-run script the guest init runs: network, soft-RoCE, then CMD.
write_run_script() {
    local ctl=$1
    shift
    {
        echo '#!/bin/sh'
        echo 'PORT=$(ls /dev/vport*p1 2>/dev/null | head -1)'
        echo '[ -n "$PORT" ] && exec >"$PORT" 2>&1'
        echo "SRC='$SRC'"
        echo "ADDR_A=$ADDR_A ADDR_B=$ADDR_B WANT_NET=${KVBATCH_RXE_NET:-veth}"
        cat <<'EOF'
mkdir -p "$SRC"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=none kvssrc "$SRC" ||
    { echo "rxe-vm(guest): cannot mount the source share"; echo 125 >/kvsctl/status; exit; }
modprobe -a rdma_rxe ib_uverbs rdma_ucm veth || echo "rxe-vm(guest): modprobe failed"
ip link set lo up
for k in all default; do
    sysctl -qw net.ipv4.conf.$k.rp_filter=0 net.ipv4.conf.$k.accept_local=1
done
net=none
# Two rxe devices on a veth pair, both ends in this namespace (6.1's rxe
# listens on UDP 4791 only in the initial one). Traffic between the two
# local addresses is policy-routed out through the sender's own end, so
# that it crosses the pair instead of short-cutting through lo: the `iif
# lo` rules catch locally generated packets (output routes carry iif lo).
# The `oif` rules are for rdma_cm: before it accepts a connect request it
# checks that a FIB lookup {oif = the receiving device's netdev, to = the
# client, from = the listening address} leaves by that netdev
# (validate_ipv4_net_dev). That lookup carries no iif, so the `iif lo`
# rules do not match; the local table then has no route for the peer's
# address through this end, and rdma_cm REJECTs (reason 28, consumer
# defined) although raw verbs work.
if [ "$WANT_NET" != dummy ] && ip link add kvsa type veth peer name kvsb 2>/dev/null; then
    for d in kvsa kvsb; do
        sysctl -qw net.ipv4.conf.$d.rp_filter=0 net.ipv4.conf.$d.accept_local=1
    done
    # MTU 9000 gives rxe a 4096-byte path MTU. At 1500 (path MTU 1024) a
    # 1 MiB WRITE is 1024 packets and, under TCG, its QP was seen to fail
    # (ECONNRESET in test_round_trip_sizes) with no packet dropped.
    ip link set kvsa mtu 9000 && ip link set kvsb mtu 9000 &&
        ip addr add $ADDR_A/32 dev kvsa && ip addr add $ADDR_B/32 dev kvsb &&
        ip link set kvsa up && ip link set kvsb up &&
        ip rule add pref 10 iif lo to $ADDR_B lookup 100 &&
        ip route add $ADDR_B dev kvsa table 100 &&
        ip rule add pref 11 iif lo to $ADDR_A lookup 101 &&
        ip route add $ADDR_A dev kvsb table 101 &&
        ip rule add pref 12 oif kvsa to $ADDR_B lookup 100 &&
        ip rule add pref 13 oif kvsb to $ADDR_A lookup 101 &&
        ip rule add pref 100 lookup local && ip rule del pref 0 &&
        rdma link add rxe_a type rxe netdev kvsa &&
        rdma link add rxe_b type rxe netdev kvsb && net=veth
    # librdmacm is what kvbatch uses: probe it with rping and fall back to
    # the dummy set-up when it fails.
    if [ $net = veth ]; then
        timeout 15 rping -s -a $ADDR_A -C 1 >/dev/null 2>&1 &
        sleep 1
        if ! timeout 10 rping -c -a $ADDR_A -C 1 >/dev/null 2>&1; then
            echo "rxe-vm(guest): rdma_cm fails across the veth pair; using one dummy netdev"
            net=none
        fi
        wait
    fi
    if [ $net != veth ]; then
        rdma link del rxe_a 2>/dev/null; rdma link del rxe_b 2>/dev/null
        for p in 10 11 12 13; do ip rule del pref $p 2>/dev/null; done
        ip rule add pref 0 lookup local 2>/dev/null; ip rule del pref 100 2>/dev/null
        ip link del kvsa 2>/dev/null
    fi
fi
# Fallback: one rxe device on a dummy netdev holding both addresses; rxe
# hands packets between its own QPs internally, with the full protocol.
if [ $net = none ]; then
    modprobe dummy numdummies=0
    ip link add kvsd type dummy && ip addr add $ADDR_A/32 dev kvsd &&
        ip addr add $ADDR_B/32 dev kvsd && ip link set kvsd up &&
        rdma link add rxe_d type rxe netdev kvsd && net=dummy
fi
case $net in
veth) export KVS_RDMA_DEV_A=rxe_a KVS_RDMA_DEV_B=rxe_b ;;
dummy) export KVS_RDMA_DEV_A=rxe_d KVS_RDMA_DEV_B=rxe_d ;;
esac
export KVS_RDMA_ADDR_A=$ADDR_A KVS_RDMA_ADDR_B=$ADDR_B KVS_RXE_NET=$net
echo "rxe-vm(guest): soft-RoCE on $net: ${KVS_RDMA_DEV_A:-none} $ADDR_A, ${KVS_RDMA_DEV_B:-none} $ADDR_B"
ulimit -l unlimited
. /kvsctl/env
cd "$CWD" 2>/dev/null || cd "$SRC"
sh /kvsctl/cmd
echo $? >/kvsctl/status
sync
EOF
    } >"$ctl/run.sh"
    {
        printf 'export HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin TERM=dumb\n'
        printf 'CWD=%q\n' "$PWD"
        local v
        for v in $(compgen -e); do
            case $v in
            KVS* | KVSTORE_* | KVBATCH_* | BUILD | SAN | TESTS | TEST_TIMEOUT | REPEAT | RDMA_SKIP_TESTS)
                [[ $v == KVBATCH_RXE_* ]] && continue
                printf 'export %s=%q\n' "$v" "${!v}"
                ;;
            esac
        done
    } >"$ctl/env"
    printf '%q ' "$@" >"$ctl/cmd"
    echo >>"$ctl/cmd"
}

run_vm() {
    local secs=$TIMEOUT
    while [ $# -gt 0 ]; do
        case $1 in
        -t)
            secs=$2
            shift 2
            ;;
        --)
            shift
            break
            ;;
        *) die "usage: rxe-vm.sh run [-t SECS] -- CMD [ARGS...]" ;;
        esac
    done
    [ $# -gt 0 ] || die "usage: rxe-vm.sh run [-t SECS] -- CMD [ARGS...]"
    ensure_image

    local ctl qpid tpid rc
    ctl=$(mktemp -d /tmp/kvbatch-rxe-run.XXXXXX)
    write_run_script "$ctl" "$@"
    : >"$ctl/out.log"
    timeout -k 5 "$secs" qemu-system-x86_64 -nodefaults -no-user-config -display none \
        -no-reboot -accel tcg,thread=multi -cpu max -smp 2 -m 2048 \
        -kernel "$CACHE/vmlinuz" -initrd "$CACHE/initrd.img" \
        -append "root=/dev/vda rw console=ttyS0 panic=-1 quiet init=/sbin/kvs-init" \
        -drive "file=$CACHE/image.ext4,format=raw,if=virtio,snapshot=on" \
        -virtfs "local,path=$ctl,mount_tag=kvsctl,security_model=none,id=kvsctl" \
        -virtfs "local,path=$SRC,mount_tag=kvssrc,security_model=none,id=kvssrc" \
        -serial "file:$ctl/console.log" \
        -device virtio-serial-pci -chardev "file,id=kvsout,path=$ctl/out.log" \
        -device virtserialport,chardev=kvsout,name=kvsout </dev/null &
    qpid=$!
    # Stream the guest's output while it runs.
    tail -n +1 -f --pid=$qpid "$ctl/out.log" &
    tpid=$!
    rc=0
    wait $qpid || rc=$?
    wait $tpid 2>/dev/null || true
    if [ -s "$ctl/status" ]; then
        rc=$(cat "$ctl/status")
    else
        if [ "$rc" -eq 124 ]; then
            log "timed out after $secs s"
        else
            log "the VM stopped without an exit status (qemu exit $rc)"
        fi
        log "guest console (last lines):"
        tail -20 "$ctl/console.log" >&2 || true
        rc=125
    fi
    rm -rf "$ctl"
    return "$rc"
}

case "${1:-}" in
image) ensure_image ;;
run)
    shift
    run_vm "$@"
    ;;
clean) rm -rf "$CACHE" ;;
*)
    echo "usage: rxe-vm.sh image | run [-t SECS] -- CMD [ARGS...] | clean" >&2
    exit 2
    ;;
esac
