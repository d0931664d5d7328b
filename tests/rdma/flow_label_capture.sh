#!/bin/sh
# Runs a command while tcpdump captures the RoCE v2 packets (UDP port 4791, first 128 bytes) on an
# interface, then checks them against the flow labels the command's plugin logged at INFO
# (tests/rdma/flow_label_check.py; prints one row per QP).
#   flow_label_capture.sh IFACE labels|off MIN_QPS CMD [ARGS...]
# CMD's stderr (where SLUICE_TEST_LOG_LEVEL=3 puts the INFO lines) goes to a log that is checked;
# its last 40 lines are shown when CMD fails. Exit status: CMD's if it failed, else the check's.
set -u
here=$(dirname "$0")
ifc=${1:?usage: flow_label_capture.sh IFACE labels|off MIN_QPS CMD...} mode=${2:?} min=${3:?}
shift 3
command -v tcpdump > /dev/null || { echo "flow_label_capture: tcpdump missing (scripts/setup installs it)" >&2; exit 1; }
out=$(mktemp -d "${TMPDIR:-/tmp}/flow_capture.XXXXXX") || exit 1
tcpdump -i "$ifc" -nn -U -s 128 -w "$out/cap.pcap" 'udp dst port 4791' 2> "$out/tcpdump" &
tpid=$!
n=0
until grep -q 'listening on' "$out/tcpdump" 2> /dev/null; do
  n=$((n + 1))
  if [ $n -gt 400 ] || ! kill -0 $tpid 2> /dev/null; then
    echo "flow_label_capture: tcpdump did not start:" >&2
    cat "$out/tcpdump" >&2
    exit 1
  fi
  sleep 0.05
done
"$@" 2> "$out/log"
rc=$?
sleep 0.5
kill -INT $tpid
wait $tpid
if [ $rc -ne 0 ]; then
  tail -n 40 "$out/log" >&2
  exit $rc
fi
grep 'flow labels for' "$out/log" | sed 's/^.*\] //' | head -n 8
echo "== UDP source ports seen per QP on $ifc (SLUICE_FLOW_LABEL ${SLUICE_FLOW_LABEL:-auto})"
python3 "$here/flow_label_check.py" "$mode" "$out/cap.pcap" "$out/log" "$min"
