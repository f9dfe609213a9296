#!/bin/sh
# inside the VM: shim over RDMA, 8 threads x 4 KiB puts (and batch-32 16K puts via the shim? no: explicit), old libkvstore vs new
set -u
BUILD=build
. scripts/rxe-lib.sh
rxe_kvstored 7492 /tmp/kvstored-inl.log
one() {
    lib=$1; shift
    env $lib LD_PRELOAD=$PWD/build/lib/libkvbatch.so KVSTORE_TIMEOUT_MS=60000 timeout 120 build/bin/kvbench "$@" --servers "$URL" --quiet 2>&1 | awk '$1 == "run" { for (i = 1; i <= NF; i++) if ($(i + 1) == "ops/s") print $i }'
}
for r in 1 2 3 4 5; do
  for w in "put --mode single --threads 8 --size 4096 --keys 1024 --ops 1000" "get --mode single --threads 8 --size 4096 --keys 1024 --ops 1000"; do
    a=$(one LD_LIBRARY_PATH=$PWD/ab-old/src/build/lib $w)
    b=$(one X=1 $w)
    echo "round $r ${w%% *}: old $a new $b"
  done
done
