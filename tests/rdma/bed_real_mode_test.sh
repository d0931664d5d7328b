#!/usr/bin/env bash
# Unit test (label unit; no VM, no device): scripts/rdma-bed's real mode needs an ACTIVE port in
# sysfs AND a /dev/infiniband/uverbsN that opens read-write. A container that sees the host's sysfs
# without the device files (or without the right to open them) is not "real". A fake tree stands in
# for /sys and /dev (SLUICE_BED_SYSFS, SLUICE_BED_DEVFS).
set -uo pipefail
BED=$(cd "$(dirname "$0")/../.." && pwd)/scripts/rdma-bed
T=$(mktemp -d); trap 'chmod -R u+w "$T"; rm -rf "$T"' EXIT
mkdir -p "$T/sys/class/infiniband/mlx5_0/ports/1" "$T/sys/class/infiniband_verbs/uverbs0" "$T/dev"
echo "4: ACTIVE" > "$T/sys/class/infiniband/mlx5_0/ports/1/state"
echo mlx5_0 > "$T/sys/class/infiniband_verbs/uverbs0/ibdev"
fails=0
mode() { SLUICE_BED_SYSFS=$T/sys SLUICE_BED_DEVFS=$T/dev SLUICE_BED_MODE='' "$BED" --print-mode 2>"$T/err"; }
check() {  # check NAME WANT_REAL(yes|no) [REGEX for stderr]
  local m; m=$(mode)
  if { [ "$2" = yes ] && [ "$m" = real ]; } || { [ "$2" = no ] && [ "$m" != real ]; }; then
    if [ -n "${3:-}" ] && ! grep -Eq -- "$3" "$T/err"; then
      echo "FAIL $1: mode $m but the reason /$3/ is missing: $(cat "$T/err")"; fails=$((fails + 1)); return
    fi
    echo "ok   $1: mode $m ${3:+($(cat "$T/err"))}"
  else
    echo "FAIL $1: mode $m, wanted real=$2; $(cat "$T/err")"; fails=$((fails + 1))
  fi
}
check "sysfs only, no /dev/infiniband" no 'mlx5_0: ACTIVE port but .*/infiniband/uverbs0 does not exist'
mkdir -p "$T/dev/infiniband"
: > "$T/dev/infiniband/uverbs0"
chmod 000 "$T/dev/infiniband/uverbs0"
if [ "$(id -u)" != 0 ]; then
  check "uverbs0 not openable" no 'cannot be opened read-write'
fi
chmod 600 "$T/dev/infiniband/uverbs0"
check "ACTIVE port and a usable uverbs0" yes
echo "1: DOWN" > "$T/sys/class/infiniband/mlx5_0/ports/1/state"
check "port DOWN" no
echo "4: ACTIVE" > "$T/sys/class/infiniband/mlx5_0/ports/1/state"
rm "$T/sys/class/infiniband_verbs/uverbs0/ibdev"
check "no uverbs names the device" no 'no .*infiniband_verbs/uverbs\*/ibdev names it'
# --mode real refuses with the reason.
out=$(SLUICE_BED_SYSFS=$T/sys SLUICE_BED_DEVFS=$T/dev "$BED" --mode real -- true 2>&1); rc=$?
if [ "$rc" != 0 ] && grep -q 'usable /dev/infiniband/uverbs' <<<"$out"; then
  echo "ok   --mode real refuses: $(printf '%s' "$out" | tail -1)"
else
  echo "FAIL --mode real: exit $rc: $out"; fails=$((fails + 1))
fi
echo "bed_real_mode_test: $fails failure(s)"
[ "$fails" = 0 ]
