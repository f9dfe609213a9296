#!/bin/bash
# install-check.sh - make install into a temporary DESTDIR puts exactly the
# files a user needs (no more, no fewer), kvstore.pc names the shim, every
# program has a man page that groff renders without a warning and that names
# every option of its --help, and make uninstall removes every file again.
# Run from the source tree's root; BUILD and SAN as for make.
# Exit status: 0 all good, 1 a check failed (each failure on stderr).
set -u
BUILD=${BUILD:-build}
SAN=${SAN:-}
PREFIX=/usr/local
dest=$(mktemp -d /tmp/kvb-install-check.XXXXXX) || exit 1
trap 'rm -rf "$dest"' EXIT
root=$dest$PREFIX
bad=0
fail() { echo "install-check: $*" >&2; bad=1; }

if ! make -s --no-print-directory install BUILD="$BUILD" SAN="$SAN" PREFIX=$PREFIX DESTDIR="$dest" \
    >"$dest.log" 2>&1; then
    cat "$dest.log" >&2; rm -f "$dest.log"
    fail "make install failed"; exit 1
fi
rm -f "$dest.log"

# What a user needs, independent of the Makefile's own lists.
programs="kvstored kvbench kvbatch-stat kvstress kvbatch-tune kvs-cli"
{
    for p in $programs; do echo "bin/$p"; done
    printf '%s\n' include/kvstore.h include/mooncake/store_c.h \
        lib/libkvstore.so lib/libkvstore.so.1 lib/libkvbatch.so \
        lib/libkvstore_mooncake.so lib/libkvstore_mooncake.so.1 \
        lib/pkgconfig/kvstore.pc lib/pkgconfig/kvstore_mooncake.pc \
        share/doc/kvbatch/README.md
    for d in docs/*.md; do echo "share/doc/kvbatch/${d#docs/}"; done
    for m in docs/man/*.[0-9]; do n=${m##*/}; echo "share/man/man${n##*.}/$n"; done
    if [ -d "$BUILD/python" ]; then
        site=$(cd "$root" && ls -d lib/python3*/*-packages 2>/dev/null | head -1)
        [ -n "$site" ] || fail "the Python modules are built but none was installed"
        ext=$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
        printf '%s\n' "$site/kvstore$ext" "$site/mooncake/__init__.py" "$site/mooncake/store$ext"
    fi
} | sort >"$dest/.want"
(cd "$root" && find . \( -type f -o -type l \) -printf '%P\n' | sort) >"$dest/.got"
missing=$(comm -23 "$dest/.want" "$dest/.got")
extra=$(comm -13 "$dest/.want" "$dest/.got")
[ -z "$missing" ] || fail "not installed: $(echo $missing)"
[ -z "$extra" ] || fail "installed but not expected: $(echo $extra)"

# kvstore.pc and kvstore_mooncake.pc: the shim's path, the version.
version=$("$BUILD/bin/kvstored" --version | awk '{ print $2 }')
for pc in kvstore kvstore_mooncake; do
    shim=$(PKG_CONFIG_PATH=$root/lib/pkgconfig pkg-config --variable=shim $pc)
    [ "$shim" = "$PREFIX/lib/libkvbatch.so" ] || fail "$pc.pc: shim='$shim', not $PREFIX/lib/libkvbatch.so"
    v=$(PKG_CONFIG_PATH=$root/lib/pkgconfig pkg-config --modversion $pc)
    [ "$v" = "$version" ] || fail "$pc.pc: Version '$v', not '$version'"
done
[ -f "$dest$(PKG_CONFIG_PATH=$root/lib/pkgconfig pkg-config --variable=shim kvstore)" ] ||
    fail "the shim kvstore.pc names is not installed"

# Man pages: one per program, groff renders each without a warning, each names
# the long options its program's --help lists, and points at installed docs.
for p in $programs; do
    [ -f "$root/share/man/man1/$p.1" ] || { fail "no man page for $p"; continue; }
    help=$(cd "$root/bin" && LD_LIBRARY_PATH= ./"$p" --help 2>&1)
    # the options of its option list (lines that start with one), not those of examples
    for o in $(printf '%s\n' "$help" | grep -oE -- '^ +(-[a-zA-Z], +)?--[a-z][a-z0-9-]*' |
        grep -o -- '--[a-z0-9-]*' | sort -u); do
        [ "$o" = --help ] || [ "$o" = --version ] && continue
        grep -q -- "$(printf '%s' "$o" | sed 's/-/\\\\-/g')" "$root/share/man/man1/$p.1" ||
            fail "$p.1 does not name $o (in $p --help)"
    done
done
if command -v groff >/dev/null; then
    for m in "$root"/share/man/man*/*; do
        w=$(groff -ww -z -man "$m" 2>&1)
        [ -z "$w" ] || fail "groff warns on ${m#"$root"/}: $w"
    done
fi
for m in "$root"/share/man/man*/*; do
    for d in $(grep -o "$PREFIX/share/doc/kvbatch/[A-Za-z.-]*" "$m" | sort -u); do
        [ -f "$dest$d" ] || fail "${m#"$root"/} names $d, which is not installed"
    done
done

if ! make -s --no-print-directory uninstall BUILD="$BUILD" SAN="$SAN" PREFIX=$PREFIX DESTDIR="$dest" \
    >/dev/null 2>&1; then
    fail "make uninstall failed"
fi
left=$(cd "$root" && find . \( -type f -o -type l \) -printf '%P\n')
[ -z "$left" ] || fail "left after make uninstall: $(echo $left)"
[ ! -d "$root/share/doc/kvbatch" ] || fail "share/doc/kvbatch left after make uninstall"
[ $bad -eq 0 ] && echo "install-check: $(wc -l <"$dest/.want") files installed and removed, all checks passed"
exit $bad
