#!/usr/bin/env bash
# Inside the one-VM bed: adds a Soft-iWARP device on the netdev of the bed's first RDMA device
# (beside it), then runs plugin_iwarp_test and checks that sluice-info shows the iWARP device (found
# by its transport, never by name) with its transport, the connection manager it would use, and why
# Sluice does not use it.   iwarp_bed.sh SIW_KO PLUGIN_IWARP_TEST SLUICE_INFO
set -euo pipefail
ko=$1 test=$2 info=$3
modprobe libcrc32c
if [ "$ko" = siw ]; then modprobe siw; else insmod "$ko"; fi
netdev=$(rdma link show | awk '{for (i = 1; i < NF; i++) if ($i == "netdev") { print $(i + 1); exit }}')
[ -n "$netdev" ] || { echo "iwarp_bed: no netdev of a bed device" >&2; exit 1; }
rdma link add sluice_iw0 type siw netdev "$netdev"
"$test"
dev=$(ibv_devinfo | awk '/hca_id:/ {d = $2} /transport:/ && /iWARP/ {print d; exit}')
[ -n "$dev" ] || { echo "iwarp_bed: ibv_devinfo lists no iWARP device" >&2; exit 1; }
out=$("$info")
# The device's block: its line and the indented port lines under it.
block=$(printf '%s\n' "$out" | awk -v d="$dev" '$1 == d {on = 1; print; next} on && !/^    / {on = 0} on')
printf '%s\n' "$block"
for want in "transport iWARP" "Sluice would use: none: $dev is an iWARP device" \
  "connection manager: rdmacm (iWARP: connections must go through rdma_cm)"; do
  grep -qF "$want" <<<"$block" || { echo "iwarp_bed: sluice-info lacks: $want" >&2; exit 1; }
done
echo "iwarp_bed: sluice-info shows $dev as iWARP, rdmacm, not used"
