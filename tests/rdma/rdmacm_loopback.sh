#!/usr/bin/env bash
# rdmacm_loopback.sh CMD [ARGS...] [-- CMD [ARGS...]]...: runs data-path test binaries, one after
# the other (all of them; the exit status is the first non-zero one), with every connection set up
# through librdmacm (tests/rdma/rdmacm.cmake): SLUICE_CM=rdmacm, both ends of every connection on
# the test pair's first port (SLUICE_TEST_DEVICES=dev:port, loopback), and the out-of-band
# interface pinned to that port's own network interface (NCCL_SOCKET_IFNAME==netdev), whose address
# the listen handle carries and rdma_cm resolves back to the port.
#
# Why one port: rdma_cm resolves an address of this host to the device whose interface holds it,
# so between two ports of one network namespace (the one-VM bed's rxe0 and rxe1) a connect always
# resolves to the listener's device, never to its own, and only oob can join them. The two-VM bed
# (plugin_cm_two_host) covers rdma_cm between two kernels.
#
# The binary itself proves the choice (net_harness.h, check_cm_used): with SLUICE_CM=rdmacm every
# connection must log its rdmacm choice and hold an rdma_cm event channel while open.
# Exit 77 (skip) when the port has no network interface with an IP address (InfiniBand without
# IPoIB): rdma_cm cannot run there.
set -euo pipefail
here=$(dirname "$0")
# shellcheck source=tests/rdma/test_devices.sh
. "$here/test_devices.sh"
ports=$(sluice_test_ports) || exit 1
first=${ports%% *}
dev=${first%:*}
port=${first##*:}
sys="$SLUICE_SYS_IB/$dev/ports/$port"
ndev=$(cat "$sys/gid_attrs/ndevs/0" 2>/dev/null || true)
if [ -z "$ndev" ]; then  # InfiniBand: the IPoIB interface of the same device and port
  for n in "$SLUICE_SYS_IB/$dev/device/net/"*; do
    [ -e "$n/dev_port" ] || continue
    if [ "$(cat "$n/dev_port")" = "$((port - 1))" ]; then ndev=${n##*/}; break; fi
  done
fi
if [ -z "$ndev" ] || [ -z "$(ip -o addr show dev "$ndev" 2>/dev/null)" ]; then
  echo "rdmacm_loopback: $dev:$port has no network interface with an IP address" \
    "(${ndev:-none}): rdma_cm cannot connect through it; skipped" >&2
  exit 77
fi
echo "rdmacm_loopback: SLUICE_CM=rdmacm, loopback on $dev:$port, listener address on $ndev" \
  "($(ip -o addr show dev "$ndev" | awk '{ printf "%s ", $4 }'))" >&2
export SLUICE_CM=rdmacm SLUICE_TEST_DEVICES="$dev:$port" NCCL_SOCKET_IFNAME="=$ndev"
rc=0
while [ $# -gt 0 ]; do
  cmd=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do cmd+=("$1"); shift; done
  [ $# -gt 0 ] && shift  # the "--"
  [ ${#cmd[@]} -gt 0 ] || continue
  set +e
  "${cmd[@]}"
  r=$?
  set -e
  name=${cmd[0]}
  for a in "${cmd[@]}"; do  # past "env VAR=..." to the binary
    case "$a" in env | *=*) ;; *) name=$a; break ;; esac
  done
  echo "rdmacm_loopback: ${name##*/} exited $r" >&2
  [ "$rc" -ne 0 ] || rc=$r
done
exit "$rc"
