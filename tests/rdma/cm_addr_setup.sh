#!/bin/sh
# Two-host bed, inside a VM (tests/rdma/cm_addr.cmake): gives the host a second RDMA device on an
# interface of its own with an address in a subnet of its own, like a routed-RoCE host whose RDMA
# NIC has its own IP while the out-of-band socket stays on the management interface. Prints the
# environment that selects it: NCCL_IB_HCA (exactly the new device) and NCCL_SOCKET_IFNAME (exactly
# the interface holding the bed address), for `env $(cm_addr_setup.sh) CMD`.
#
# The interface is a VXLAN tunnel over the bed link, 10.77.0.<host+1>/24, with no lower device.
# Not a macvlan or VLAN on eth0: those are upper devices of eth0, so the kernel's RoCE GID
# management also puts their addresses into the GID table of eth0's Soft-RoCE device, and
# rdma_bind_addr of the new address then picks that device (the first in rdma_cm's list), not the
# new one (seen on the bed's 6.1 kernel with macvlan: the first device's table held the macvlan's
# GID, and `rdma resource show cm_id` put listeners on the new address on the first device). A
# VXLAN without `dev` is no upper device of eth0: only the new device holds its addresses.
# Waits until the new device's port is ACTIVE with the address's GID. Name: $SLUICE_CM_ADDR_DEV,
# default cmaddr0 (tests must not depend on device names: the test selects it through this output).
set -eu
a=${SLUICE_BED_ADDR:?not in the two-host bed}
peer=${SLUICE_BED_PEER_ADDR:?not in the two-host bed}
h=${SLUICE_BED_HOST:?not in the two-host bed}
name=${SLUICE_CM_ADDR_DEV:-cmaddr0}
bed_if=$(ip -o -4 addr show | awk -v a="$a/16" '$4 == a { print $2; exit }')
[ -n "$bed_if" ] || { echo "cm_addr_setup: no interface holds $a/16" >&2; exit 1; }
own="10.77.0.$((h + 1))"
modprobe vxlan
ip link add cmvx0 type vxlan id 77 remote "$peer" local "$a" dstport 4789
ip addr add "$own/24" dev cmvx0
ip link set cmvx0 up
rdma link add "$name" type rxe netdev cmvx0
sys=/sys/class/infiniband/$name/ports/1
# shellcheck disable=SC2046,SC2183  # the address splits into its four octets on purpose
want=$(printf 'ffff:%02x%02x:%02x%02x' $(echo "$own" | tr . ' '))
i=0
while [ $i -lt 100 ]; do
  if grep -q ACTIVE "$sys/state" 2>/dev/null && cat "$sys"/gids/* 2>/dev/null | grep -q "$want"; then
    echo "cm_addr_setup: $name on cmvx0 ($own/24); the out-of-band interface $bed_if ($a)" >&2
    echo "NCCL_IB_HCA==$name NCCL_SOCKET_IFNAME==$bed_if"
    exit 0
  fi
  i=$((i + 1))
  sleep 0.1
done
echo "cm_addr_setup: $name did not get ACTIVE with the GID of $own within 10 s" >&2
exit 1
