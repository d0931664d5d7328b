#!/usr/bin/env bash
# rdmacm_fused.sh CMD [ARGS...]: runs a data-path test binary over the one-VM bed's fused device
# (SLUICE_TEST_FUSE=fused: both ends fused of the test pair's two ports) with every connection set
# up through librdmacm (SLUICE_CM=rdmacm; tests/rdma/plugin.cmake, plugin_rdma_fused_rdmacm).
#
# A fused listener binds one rdma_cm listener per member, each to an address of that member's own
# interface (never a link-local one beyond the out-of-band address), and the connector resolves
# path p from its member p's address to the listener's member p (fused -> fused in one network
# namespace: each path is a loopback on one port, as rdmacm_loopback.sh explains). The bed's
# interfaces carry only link-local IPv6, so this gives each port's interface an IPv4 address of a
# subnet of its own for the run (removed at exit) and waits for its IPv4-mapped GID. The
# out-of-band interface is the first port's (NCCL_SOCKET_IFNAME). The binary proves the choice
# (net_harness.h, check_cm_used): every connection logged rdmacm and held an rdma_cm channel.
# Exit 77 (skip) where the ports have no network interface (InfiniBand) or this cannot add
# addresses (not root): rdma_cm over fused devices is then covered across two hosts only
# (plugin_fusion_two_host).
set -euo pipefail
here=$(dirname "$0")
# shellcheck source=tests/rdma/test_devices.sh
. "$here/test_devices.sh"
ports=$(sluice_test_ports) || exit 1
a=${ports%% *}
b=${ports##* }
if [ "$a" = "$b" ]; then
  echo "rdmacm_fused: one port ($a): a fused device needs the test pair's two" >&2
  exit 1
fi
netdev() { cat "$SLUICE_SYS_IB/${1%:*}/ports/${1##*:}/gid_attrs/ndevs/0" 2>/dev/null || true; }
na=$(netdev "$a")
nb=$(netdev "$b")
if [ -z "$na" ] || [ -z "$nb" ]; then
  echo "rdmacm_fused: $a or $b has no network interface (${na:-none}, ${nb:-none}); skipped" >&2
  exit 77
fi
added=()
# shellcheck disable=SC2317   # run by the EXIT trap
cleanup() {
  for x in "${added[@]}"; do ip addr del "${x#* }" dev "${x%% *}" 2> /dev/null || true; done
}
trap cleanup EXIT
i=0
for n in "$na" "$nb"; do
  i=$((i + 1))
  if [ -z "$(ip -4 -o addr show dev "$n" scope global 2>/dev/null)" ]; then
    if ! ip addr add "10.213.$i.1/24" dev "$n" 2>/dev/null; then
      echo "rdmacm_fused: cannot give $n an address (not root?); skipped" >&2
      exit 77
    fi
    added+=("$n 10.213.$i.1/24")
  fi
done
for p in "$a" "$b"; do  # each port's GID table holds its interface's IPv4 address
  n=$(netdev "$p")
  v4=$(ip -4 -o addr show dev "$n" scope global | awk '{ print $4; exit }')
  v4=${v4%/*}
  # shellcheck disable=SC2086   # the address's four numbers
  tail=$(printf '%02x%02x:%02x%02x' ${v4//./ })
  for ((k = 0; k < 100; k++)); do
    grep -qs "ffff:$tail" "$SLUICE_SYS_IB/${p%:*}/ports/${p##*:}"/gids/* && break
    sleep 0.1
  done
  if [ "$k" -ge 100 ]; then
    echo "rdmacm_fused: $p has no GID of $v4 within 10 s" >&2
    exit 1
  fi
  echo "rdmacm_fused: $p on $n ($v4), its GID after $((k * 100)) ms" >&2
done
export SLUICE_CM=rdmacm SLUICE_TEST_FUSE=fused SLUICE_TEST_DEVICES="$a,$b" NCCL_SOCKET_IFNAME="=$na"
set +e
"$@"
rc=$?
set -e
echo "rdmacm_fused: ${1##*/} exited $rc" >&2
exit "$rc"
