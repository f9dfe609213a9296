#!/bin/bash
# run-tests.sh [PATTERN...] - runs the built test binaries under $BUILD/tests,
# each bounded by a timeout, and ends with "programs: N passed, N failed" and
# "tests: N passed, N failed" (cmocka cases summed over the programs).
# SAN=tsan runs only the threaded tests (names listed in tests/threaded.txt).
set -u
BUILD=${BUILD:-build}
SAN=${SAN:-}
TEST_TIMEOUT=${TEST_TIMEOUT:-300}
export KVS_TEST_BUILD=$BUILD
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
# kvstored's local sockets (and the clients' look-up of them) in a private
# directory. The client tests reach their servers over the local socket
# (KVSTORE_TRANSPORT unset: auto) unless KVSTORE_TRANSPORT=tcp is exported.
KVSTORE_RUNTIME_DIR=$(mktemp -d /tmp/kvs-run.XXXXXX) || exit 1
export KVSTORE_RUNTIME_DIR

bins=$(find "$BUILD/tests" -type f -perm -u+x -name 'test_*' 2>/dev/null | sort)
if [ "$SAN" = tsan ] && [ -f tests/threaded.txt ]; then
    bins=$(for b in $bins; do grep -qx "$(basename "$b")" tests/threaded.txt && echo "$b"; done)
fi
if [ $# -gt 0 ]; then
    bins=$(for b in $bins; do for p in "$@"; do case "$b" in *$p*) echo "$b" ;; esac; done; done | sort -u)
fi

# Sums cmocka's own "[  PASSED  ] N test(s)" / "[  FAILED  ] N test(s)" lines
# of one program's output into tests_pass / tests_fail; a program that failed
# without a cmocka failure line (crash, timeout, sanitizer) counts as one.
count_cases() {
    local log=$1 rc=$2 p f k
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
    k=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
    tests_pass=$((tests_pass + p))
    tests_fail=$((tests_fail + f))
    tests_skip=$((tests_skip + k))
}

log=$(mktemp)
trap 'rm -f "$log"; rm -rf "$KVSTORE_RUNTIME_DIR"' EXIT
pass=0 fail=0 failed= tests_pass=0 tests_fail=0 tests_skip=0
for b in $bins; do
    echo "=== $b"
    timeout -k 10 "$TEST_TIMEOUT" "$b" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    count_cases "$log" "$rc"
    if [ "$rc" -eq 0 ]; then
        pass=$((pass + 1))
    else
        echo "--- FAILED: $b (exit $rc)"
        fail=$((fail + 1))
        failed="$failed $(basename "$b")"
    fi
done
[ -n "$failed" ] && echo "failed test programs:$failed"
echo "programs: $pass passed, $fail failed"
echo "tests: $tests_pass passed, $tests_fail failed, $tests_skip skipped"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
