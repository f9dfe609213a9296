#!/bin/bash
# run-tests.sh [PATTERN...] - runs the built test binaries under $BUILD/tests,
# each bounded by a timeout, and ends with one "N passed, N failed" line.
# SAN=tsan runs only the threaded tests (names listed in tests/threaded.txt).
set -u
BUILD=${BUILD:-build}
SAN=${SAN:-}
TEST_TIMEOUT=${TEST_TIMEOUT:-300}
export KVS_TEST_BUILD=$BUILD
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

bins=$(find "$BUILD/tests" -type f -perm -u+x -name 'test_*' 2>/dev/null | sort)
if [ "$SAN" = tsan ] && [ -f tests/threaded.txt ]; then
    bins=$(for b in $bins; do grep -qx "$(basename "$b")" tests/threaded.txt && echo "$b"; done)
fi
if [ $# -gt 0 ]; then
    bins=$(for b in $bins; do for p in "$@"; do case "$b" in *$p*) echo "$b" ;; esac; done; done | sort -u)
fi

pass=0 fail=0 failed=
for b in $bins; do
    echo "=== $b"
    if timeout -k 10 "$TEST_TIMEOUT" "$b"; then
        pass=$((pass + 1))
    else
        rc=$?
        echo "--- FAILED: $b (exit $rc)"
        fail=$((fail + 1))
        failed="$failed $(basename "$b")"
    fi
done
[ -n "$failed" ] && echo "failed test programs:$failed"
echo "test programs: $pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
