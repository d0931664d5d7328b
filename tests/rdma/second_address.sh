#!/bin/sh
# Two-host bed, inside a VM (tests/rdma/two_host.cmake): gives the bed's interface a second IPv4
# address in a subnet of its own that routes nowhere (10.99.<host+1>.1/24), holding the LOWER GID
# indexes: the bed's address is removed, the new one added, and the bed's address added back. The
# GID table alone then guesses the 10.99 GID; only the route to the peer picks the bed's one.
# `scope link` keeps the bed's address first in the interface's address list (the kernel sorts
# primaries by scope), so the out-of-band socket stays on it. Waits until both GIDs are in the table.
set -eu
a=${SLUICE_BED_ADDR:?not in the two-host bed}
h=${SLUICE_BED_HOST:?not in the two-host bed}
dev=$(ip -o -4 addr show | awk -v a="$a/16" '$4 == a { print $2; exit }')
[ -n "$dev" ] || { echo "second_address: no interface holds $a/16" >&2; exit 1; }
other="10.99.$((h + 1)).1"
ip addr del "$a/16" dev "$dev"
ip addr add "$other/24" dev "$dev"
ip addr add "$a/16" dev "$dev" scope link
# GIDs as sysfs writes them: 0000:0000:0000:0000:0000:ffff:a9fe:0001
gid_of() { printf 'ffff:%02x%02x:%02x%02x' $(echo "$1" | tr . ' '); }
want_a=$(gid_of "$a")
want_b=$(gid_of "$other")
i=0
while [ $i -lt 100 ]; do
  g=$(cat /sys/class/infiniband/*/ports/*/gids/* 2>/dev/null || true)
  if echo "$g" | grep -q "$want_a" && echo "$g" | grep -q "$want_b"; then
    echo "second_address: $dev has $(ip -o -4 addr show dev "$dev" | awk '{ printf "%s ", $4 }')" >&2
    exit 0
  fi
  i=$((i + 1))
  sleep 0.1
done
echo "second_address: the GIDs of $a and $other did not appear within 10 s" >&2
exit 1
