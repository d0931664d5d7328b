#!/usr/bin/env bash
# bundle_check.sh BUNDLE: checks scripts/gpu-bundle's folder (ctest gpu_bundle, label package):
#   * at most 64 MiB, a MANIFEST naming the source revision, the four programs and the plugin;
#   * every ELF file's NEEDED libraries (readelf -d) are in the bundle's lib/ or on the machine's
#     list (MACHINE_LIBS: glibc's libraries, the loader, libcuda.so.1, libnccl.so.2);
#   * rdma-core's libraries only in lib/rdma-core, never in lib/ (so that a node's own rdma-core
#     can be used with the rest of the bundle);
#   * under LD_LIBRARY_PATH=BUNDLE/lib/rdma-core:BUNDLE/lib:BUNDLE/lib/cxx:BUNDLE/lib/cudart, ldd
#     resolves every library of every ELF file from the bundle, except those on that list (which
#     may be "not found" here, or resolve from the system);
#   * MANIFEST names the rdma-core symbol versions our files need (run.sh's test of a node's own).
set -uo pipefail
B=$(cd "${1:?usage: bundle_check.sh BUNDLE}" && pwd)
fails=0
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
size=$(du -sb "$B" | cut -f1)
[ "$size" -le $((64 * 1024 * 1024)) ] && echo "ok   size $size bytes ($((size / 1048576)) MiB) <= 64 MiB" || bad "size $size > 64 MiB"
grep -Eq '^glibcxx: GLIBCXX_3\.4\.[0-9]+$' "$B/MANIFEST" || bad "MANIFEST has no glibcxx line"
grep -Eq '^revision: [0-9a-f]{40}' "$B/MANIFEST" && echo "ok   $(grep '^revision:' "$B/MANIFEST")" || bad "MANIFEST has no source revision"
for f in bin/gpu-check bin/sluice-info bin/nccl-allreduce lib/libnccl-net-sluice.so lib/libibverbs/librxe-rdmav34.so etc/libibverbs.d/rxe.driver lib/rdma-core/libibverbs.so.1 lib/rdma-core/librdmacm.so.1; do
  [ -e "$B/$f" ] && echo "ok   has $f" || bad "missing $f"
done
in_lib=$(cd "$B/lib" && ls -d libibverbs.so* librdmacm.so* libmlx5.so* libnl-3.so* libnl-route-3.so* 2>/dev/null | tr '\n' ' ')
[ -z "$in_lib" ] && echo "ok   rdma-core's libraries only in lib/rdma-core" || bad "rdma-core's libraries in lib/ (a node's own rdma-core could not be used): $in_lib"
grep -Eq '^rdma-core needs: .*IBVERBS_1\.[0-9]+' "$B/MANIFEST" && echo "ok   $(grep '^rdma-core needs:' "$B/MANIFEST")" || bad "MANIFEST names no IBVERBS_ version needed"
[ -s "$B/MACHINE_LIBS" ] || bad "no MACHINE_LIBS"
machine=" $(tr '\n' ' ' < "$B/MACHINE_LIBS") "
elves=0
while IFS= read -r -d '' f; do
  [ "$(head -c4 "$f" | tr -d '\0')" = $'\x7fELF' ] || continue
  elves=$((elves + 1))
  rel=${f#"$B"/}
  for n in $(readelf -d "$f" 2>/dev/null | sed -nE 's/.*\(NEEDED\).*\[(.*)\]/\1/p'); do
    case "$machine" in *" $n "*) continue ;; esac
    [ -e "$B/lib/$n" ] || [ -e "$B/lib/cxx/$n" ] || [ -e "$B/lib/cudart/$n" ] || [ -e "$B/lib/rdma-core/$n" ] || bad "$rel needs $n: neither in the bundle nor on the machine's list"
  done
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    case "$machine" in *" $name "*) continue ;; esac
    case "$path" in
      "$B"/*) ;;
      *) bad "$rel: $name resolves to $path, outside the bundle" ;;
    esac
  done < <(env -u LD_PRELOAD LD_LIBRARY_PATH="$B/lib/rdma-core:$B/lib:$B/lib/cxx:$B/lib/cudart" ldd "$f" 2>/dev/null)
done < <(find "$B" -type f -print0)
[ "$elves" -ge 8 ] && echo "ok   $elves ELF files: every NEEDED library from the bundle or the machine's list (${machine# })" || bad "only $elves ELF files"
# At run time (LD_DEBUG=libs), as run.sh runs them on a machine without rdma-core: sluice-info and
# gpu-check (which dlopens the plugin) load nothing but the bundle's libraries, the machine's, and
# libstdc++/libgcc_s (the machine's or lib/cxx).
dbg=$(mktemp -d)
for cmd in "bin/sluice-info --json" "bin/gpu-check plugin $B/lib/libnccl-net-sluice.so"; do
  # shellcheck disable=SC2086  # the command's words
  env -i LD_DEBUG=libs LD_DEBUG_OUTPUT="$dbg/ld" LD_LIBRARY_PATH="$B/lib/rdma-core:$B/lib" HWLOC_PLUGINS_PATH="$B/lib/hwloc" \
      SLUICE_CUDA_LIBRARY="$B/test/libsluice-test-fake-cuda.so" NCCL_IB_HCA==none $B/$cmd > /dev/null 2>&1
  loaded=$(cat "$dbg"/ld.* 2>/dev/null | sed -n 's/.*calling init: //p' | sort -u)
  rm -f "$dbg"/ld.*
  [ -n "$loaded" ] || bad "$cmd: LD_DEBUG showed nothing"
  outside=""
  for l in $loaded; do
    case "$l" in "$B"/*) continue ;; esac
    n=${l##*/}
    case "$machine libstdc++.so.6 libgcc_s.so.1 " in *" $n "*) continue ;; esac
    outside+=" $l"
  done
  [ -z "$outside" ] && echo "ok   ${cmd%% *} loads $(echo "$loaded" | grep -c "^$B") libraries from the bundle, the rest from the machine's list" ||
    bad "${cmd%% *} loads from outside the bundle:$outside"
done
rm -rf "$dbg"
echo "bundle_check: $fails failure(s)"
[ "$fails" = 0 ]
