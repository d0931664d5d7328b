#!/usr/bin/env bash
# package test: builds the Debian package from the build tree (cpack -G DEB), checks its name,
# control fields and contents, extracts it with dpkg-deb -x into a temporary root and checks, from
# there: the library's exported symbols (tests/abi/check_exports.cmake, the same accepted set as the
# build's abi_symbols test), that it dlopens and its tables are right (abi_dlopen_c_test PATH, which
# also checks that the first INFO line names the version and revision), and
# `sluice-info --version`.
# usage: check_deb.sh SOURCE_DIR BUILD_DIR VERSION ABI_DLOPEN_TEST
set -euo pipefail
src=${1:?usage: $0 SOURCE_DIR BUILD_DIR VERSION ABI_DLOPEN_TEST}
build=${2:?}
version=${3:?}
dlopen_test=${4:?}
fail() { echo "FAIL: $*" >&2; exit 1; }
for t in cpack dpkg-deb dpkg-shlibdeps dpkg file nm; do
  command -v "$t" >/dev/null || fail "$t not found (scripts/setup installs dpkg-dev, file, binutils)"
done
work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT

arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
deb_name="sluice_${version}_${arch}.deb"

echo "== cpack -G DEB (build tree $build)"
cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/out" > "$work/cpack.log" 2>&1 ||
  { cat "$work/cpack.log"; fail "cpack -G DEB failed"; }
deb=$work/out/$deb_name
[ -f "$deb" ] || { cat "$work/cpack.log"; ls -l "$work/out"; fail "no $deb_name"; }
echo "built $deb_name ($(stat -c %s "$deb") bytes)"

echo "== control"
dpkg-deb -I "$deb" | tee "$work/info"
grep -q "^ Package: sluice$" "$work/info" || fail "Package is not sluice"
grep -q "^ Version: $version$" "$work/info" || fail "Version is not $version"
grep -q "^ Architecture: $arch$" "$work/info" || fail "Architecture is not $arch"
depends=$(sed -n 's/^ Depends: //p' "$work/info")
# dpkg-shlibdeps: the libraries the ELF files link (libibverbs, hwloc, libstdc++, libc).
for lib in libc6 libibverbs1 libstdc++6 libhwloc; do
  [[ "$depends" == *"$lib"* ]] || fail "Depends lacks $lib (shlibdeps not computed?): $depends"
done

echo "== contents"
dpkg-deb -c "$deb" | tee "$work/contents"
root=$work/root
dpkg-deb -x "$deb" "$root"
lib=$root/usr/lib/$multiarch/libnccl-net-sluice.so
info=$root/usr/bin/sluice-info
# The docs: the README and every page of the manual (docs/*.md), where the README's links point.
docs=("$root/usr/share/doc/sluice/README.md")
for page in "$src"/docs/*.md; do docs+=("$root/usr/share/doc/sluice/docs/${page##*/}"); done
[ "${#docs[@]}" -gt 1 ] || fail "no docs/*.md in $src"
for f in "$lib" "$info" "${docs[@]}"; do
  [ -f "$f" ] || fail "${f#"$root"} missing from the package"
done
# Every docs/<page>.md the README links to is in the package.
for page in $(grep -o 'docs/[a-z0-9-]*\.md' "$src/README.md" | sort -u); do
  [ -f "$root/usr/share/doc/sluice/$page" ] || fail "README links $page, which the package lacks"
done
# Nothing else than the plugin, the tool and its docs.
extra=$(find "$root" -type f -printf '/%P\n' |
  grep -v -e "^/usr/lib/$multiarch/libnccl-net-sluice.so$" -e '^/usr/bin/sluice-info$' \
    -e '^/usr/share/doc/sluice/' || true)
[ -z "$extra" ] || fail "unexpected files in the package: $extra"

# NCCL dlopens "libnccl-net-sluice.so" by name: the directory must be on the loader's default path.
if [ -d /etc/ld.so.conf.d ]; then
  grep -rqsx "/usr/lib/$multiarch" /etc/ld.so.conf /etc/ld.so.conf.d ||
    fail "/usr/lib/$multiarch is not in ld.so.conf: NCCL would not find the plugin there"
fi

echo "== exported symbols of the packaged library"
cmake -DLIB="$lib" -DNM="$(command -v nm)" -P "$src/tests/abi/check_exports.cmake"

echo "== dlopen of the packaged library (no LD_LIBRARY_PATH)"
env -u LD_LIBRARY_PATH "$dlopen_test" "$lib" | tee "$work/dlopen.log"
grep -q "^first INFO line: NET/Sluice : Sluice $version (" "$work/dlopen.log" ||
  fail "the plugin's first INFO line does not name version $version"

echo "== packaged sluice-info --version"
out=$("$info" --version)
echo "$out"
[[ "$out" =~ ^sluice-info\ $version\ \((git\ [^\)]+|unknown)\)$ ]] ||
  fail "sluice-info --version printed '$out', expected 'sluice-info $version (git <rev>|unknown)'"
echo "PASS: $deb_name builds, installs where NCCL finds it, exports the plugin tables and loads"
