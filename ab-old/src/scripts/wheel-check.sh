#!/bin/bash
# wheel-check.sh - `pip wheel .` builds the Python modules kvstore and
# mooncake.store from this tree (pyproject.toml + setup.py) offline, with the
# interpreter's own setuptools (no build isolation, no index); the wheel,
# installed into a temporary --target, imports in a clean environment, loads
# the libkvstore.so.1 it carries, has the tree's version, and talks to a
# kvstored on a loopback port, alone and under LD_PRELOAD=libkvbatch.so.
# Run from the source tree's root after make; BUILD as for make.
# Exit status: 0 good, 1 a check failed, 77 pip, setuptools or wheel missing (skip).
set -u
BUILD=${BUILD:-build}
PY=${PYTHON:-/usr/bin/python3}
if ! "$PY" -c 'import setuptools, wheel' 2>/dev/null || ! "$PY" -m pip --version >/dev/null 2>&1; then
    echo "wheel-check: $PY has no pip, setuptools or wheel (python3-pip, python3-setuptools," \
        "python3-wheel): skipped"
    exit 77
fi
tmp=$(mktemp -d /tmp/kvb-wheel.XXXXXX) || exit 1
srv=
cleanup() {
    [ -n "$srv" ] && kill "$srv" 2>/dev/null && wait "$srv" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "wheel-check: $*" >&2
    exit 1
}

KVBATCH_BUILD=$PWD/$BUILD PIP_NO_INDEX=1 timeout 600 "$PY" -m pip wheel --no-build-isolation \
    --no-deps --no-index -w "$tmp/dist" . >"$tmp/log" 2>&1 ||
    { cat "$tmp/log" >&2; fail "pip wheel . failed"; }
whl=$(ls "$tmp"/dist/*.whl 2>/dev/null)
[ "$(echo "$whl" | wc -w)" -eq 1 ] || fail "not one wheel: '$whl'"
"$PY" -m pip install --no-deps --no-index --target "$tmp/site" "$whl" >"$tmp/log" 2>&1 ||
    { cat "$tmp/log" >&2; fail "pip install --target of $whl failed"; }

"$BUILD/bin/kvstored" --listen 127.0.0.1:0 --memory 16M --unix none >"$tmp/srv.out" 2>&1 &
srv=$!
for _ in $(seq 100); do grep -qs '^listening on' "$tmp/srv.out" && break; sleep 0.1; done
addr=$(sed -n 's/^listening on //p' "$tmp/srv.out")
[ -n "$addr" ] || fail "kvstored did not start: $(cat "$tmp/srv.out")"
version=$("$BUILD/bin/kvstored" --version | awk '{ print $2 }')

check='
import os, sys
site, version, preload = sys.argv[1], sys.argv[2], sys.argv[3]
import kvstore, mooncake.store
for m in (kvstore, mooncake.store):
    assert m.__file__.startswith(site + "/"), m.__file__
libs = set(l.split()[-1] for l in open("/proc/self/maps") if "libkvstore.so" in l)
want = os.path.join(os.path.dirname(preload), "libkvstore.so.1") if preload else site + "/kvbatch.libs/libkvstore.so.1"
assert libs == {os.path.realpath(want)}, (libs, want)
assert kvstore.__version__ == version, kvstore.__version__
with kvstore.Client() as c:
    c.put("wheel.k", b"v" * 4096)
    assert c.get("wheel.k") == b"v" * 4096
    assert c.exists("wheel.k")
from mooncake.store import MooncakeDistributedStore
s = MooncakeDistributedStore()
assert s.setup("localhost:12345", "P2PHANDSHAKE", 0, 0, "tcp", "", os.environ["KVSTORE_SERVERS"]) == 0
assert s.is_exist("wheel.k") == 1
print("ok")
'
cd / || exit 1
out=$(env -i PYTHONPATH="$tmp/site" KVSTORE_SERVERS="$addr" KVSTORE_TRANSPORT=tcp \
    timeout 60 "$PY" -c "$check" "$tmp/site" "$version" "" 2>&1)
[ "$out" = ok ] || fail "the installed wheel: $out"
shim=$OLDPWD/$BUILD/lib/libkvbatch.so
out=$(env -i PYTHONPATH="$tmp/site" KVSTORE_SERVERS="$addr" KVSTORE_TRANSPORT=tcp LD_PRELOAD="$shim" \
    timeout 60 "$PY" -c "$check" "$tmp/site" "$version" "$shim" 2>&1)
[ "$out" = ok ] || fail "the installed wheel under LD_PRELOAD=$shim: $out"
echo "wheel-check: $(basename "$whl") builds, installs, imports and serves, with and without the shim"
