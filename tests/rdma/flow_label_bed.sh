#!/bin/sh
# rdma test (one VM): the UDP source ports of Sluice's QPs on the wire follow the flow labels it
# chose (SLUICE_FLOW_LABEL), or the kernel's QPN hash with the knob off.
#   flow_label_bed.sh PLUGIN_RDMA_TEST
# For each of SLUICE_TEST_FLOW_MODES (default "auto off"; e.g. "auto 12345 off" adds a seed) as
# SLUICE_FLOW_LABEL: tcpdump (UDP port 4791, first 128 bytes of
# each packet) on the netdev of the first test port, while plugin_rdma_test moves every size
# between the two test ports with 4 QPs per connection, split data (every QP carries data), oob
# connection manager, INFO logged; then tests/rdma/flow_label_check.py checks every captured packet
# against the connection's logged labels and prints one row per QP (the notes' table).
# Soft-RoCE only: a real RoCE NIC's packets never pass through the kernel's netdev, so tcpdump
# cannot see them (label `bed`: scripts/test leaves it out on real NICs).
set -u
here=$(dirname "$0")
# shellcheck source=tests/rdma/test_devices.sh
. "$here/test_devices.sh"
bin=${1:?usage: flow_label_bed.sh PLUGIN_RDMA_TEST}
ports=$(sluice_test_ports) || exit 1
# shellcheck disable=SC2086   # two words
set -- $ports
dev=${1%:*} port=${1##*:}
if [ "$(sluice_link_layer "$dev" "$port")" != Ethernet ]; then
  echo "flow_label_bed: $dev:$port is InfiniBand: flow labels do not apply (skipped)"
  echo "[  SKIPPED ] flow labels: InfiniBand"
  exit 0
fi
ndev=$(cat "/sys/class/infiniband/$dev/ports/$port/gid_attrs/ndevs/0" 2>/dev/null)
[ -n "$ndev" ] || { echo "flow_label_bed: no netdev for $dev:$port" >&2; exit 1; }
command -v tcpdump > /dev/null || { echo "flow_label_bed: tcpdump missing (scripts/setup installs it)" >&2; exit 1; }
out=$(mktemp -d "${TMPDIR:-/tmp}/flow_label.XXXXXX") || exit 1
echo "flow_label_bed: capturing on $ndev ($1 <-> $2), results in $out"
rc=0
for mode in ${SLUICE_TEST_FLOW_MODES:-auto off}; do
  tcpdump -i "$ndev" -nn -U -s 128 -w "$out/$mode.pcap" 'udp dst port 4791' 2> "$out/$mode.tcpdump" &
  tpid=$!
  n=0
  until grep -q 'listening on' "$out/$mode.tcpdump" 2>/dev/null; do
    n=$((n + 1))
    if [ $n -gt 400 ] || ! kill -0 $tpid 2>/dev/null; then
      echo "flow_label_bed: tcpdump did not start:" >&2
      cat "$out/$mode.tcpdump" >&2
      exit 1
    fi
    sleep 0.05
  done
  SLUICE_FLOW_LABEL=$mode NCCL_IB_QPS_PER_CONNECTION=4 NCCL_IB_SPLIT_DATA_ON_QPS=1 SLUICE_CM=oob \
    SLUICE_TEST_LOG_LEVEL=3 "$bin" --gtest_filter='Pairs/Transfer.AllSizesEveryByteVerified/CrossDevice' \
    > "$out/$mode.out" 2> "$out/$mode.log"
  trc=$?
  sleep 0.5
  kill -INT $tpid
  wait $tpid
  tail -n 3 "$out/$mode.out"
  if [ $trc -ne 0 ]; then
    echo "flow_label_bed: plugin_rdma_test failed (exit $trc) with SLUICE_FLOW_LABEL=$mode" >&2
    tail -n 30 "$out/$mode.log" >&2
    rc=1
    continue
  fi
  grep 'flow labels for' "$out/$mode.log" | sed 's/^.*\] //'
  check=labels
  [ "$mode" = off ] && check=off
  echo "== SLUICE_FLOW_LABEL=$mode: UDP source ports seen per QP on $ndev"
  python3 "$here/flow_label_check.py" "$check" "$out/$mode.pcap" "$out/$mode.log" 4 || rc=1
done
[ $rc -eq 0 ] && echo "flow_label_bed: PASS" || echo "flow_label_bed: FAIL"
exit $rc
