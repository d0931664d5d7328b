#!/usr/bin/env bash
# bundle_check.sh BUNDLE: checks scripts/gpu-bundle's folder (ctest gpu_bundle, label package):
#   * at most 64 MiB, a MANIFEST naming the source revision, the four programs and the plugin;
#   * every ELF file's NEEDED libraries (readelf -d) are in the bundle's lib/ or on the machine's
#     list (MACHINE_LIBS: glibc's libraries, the loader, libcuda.so.1, libnccl.so.2);
#   * under LD_LIBRARY_PATH=BUNDLE/lib:BUNDLE/lib/cxx, ldd resolves every library of every ELF file from the bundle,
#     except those on that list (which may be "not found" here, or resolve from the system).
set -uo pipefail
B=$(cd "${1:?usage: bundle_check.sh BUNDLE}" && pwd)
fails=0
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
size=$(du -sb "$B" | cut -f1)
[ "$size" -le $((64 * 1024 * 1024)) ] && echo "ok   size $size bytes ($((size / 1048576)) MiB) <= 64 MiB" || bad "size $size > 64 MiB"
grep -Eq '^glibcxx: GLIBCXX_3\.4\.[0-9]+$' "$B/MANIFEST" || bad "MANIFEST has no glibcxx line"
grep -Eq '^revision: [0-9a-f]{40}' "$B/MANIFEST" && echo "ok   $(grep '^revision:' "$B/MANIFEST")" || bad "MANIFEST has no source revision"
for f in bin/gpu-check bin/sluice-info bin/nccl-allreduce lib/libnccl-net-sluice.so lib/libibverbs/librxe-rdmav34.so etc/libibverbs.d/rxe.driver lib/libibverbs.so.1 lib/librdmacm.so.1; do
  [ -e "$B/$f" ] && echo "ok   has $f" || bad "missing $f"
done
[ -s "$B/MACHINE_LIBS" ] || bad "no MACHINE_LIBS"
machine=" $(tr '\n' ' ' < "$B/MACHINE_LIBS") "
elves=0
while IFS= read -r -d '' f; do
  head -c4 "$f" | grep -q 'ELF' || continue
  elves=$((elves + 1))
  rel=${f#"$B"/}
  for n in $(readelf -d "$f" 2>/dev/null | sed -nE 's/.*\(NEEDED\).*\[(.*)\]/\1/p'); do
    case "$machine" in *" $n "*) continue ;; esac
    [ -e "$B/lib/$n" ] || [ -e "$B/lib/cxx/$n" ] || bad "$rel needs $n: neither in the bundle nor on the machine's list"
  done
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    case "$machine" in *" $name "*) continue ;; esac
    case "$path" in
      "$B"/*) ;;
      *) bad "$rel: $name resolves to $path, outside the bundle" ;;
    esac
  done < <(env -u LD_PRELOAD LD_LIBRARY_PATH="$B/lib:$B/lib/cxx" ldd "$f" 2>/dev/null)
done < <(find "$B" -type f -print0)
[ "$elves" -ge 8 ] && echo "ok   $elves ELF files: every NEEDED library from the bundle or the machine's list (${machine# })" || bad "only $elves ELF files"
echo "bundle_check: $fails failure(s)"
[ "$fails" = 0 ]
