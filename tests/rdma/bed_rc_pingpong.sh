#!/bin/sh
# rdma test: ibv_rc_pingpong between the test pair of ports (tests/rdma/test_devices.sh:
# SLUICE_TEST_DEVICES, else the first two ACTIVE ports), server in the background, client on
# localhost, 100 round trips. RoCE passes the GID index (-g); InfiniBand addresses by LID (no -g).
# Fails if either side fails.
set -u
# shellcheck source=tests/rdma/test_devices.sh
. "$(dirname "$0")/test_devices.sh"
ports=$(sluice_test_ports) || exit 1
# shellcheck disable=SC2086   # two words
set -- $ports
a=$1 b=$2
args() {  # dev:port -> ibv_rc_pingpong device options
  gidx=$(sluice_gid_index "${1%:*}" "${1##*:}")
  echo "-d ${1%:*} -i ${1##*:}${gidx:+ -g $gidx}"
}
tcp_port=${SLUICE_PINGPONG_PORT:-18515}
echo "bed_rc_pingpong: $a ($(sluice_link_layer "${a%:*}" "${a##*:}")) <-> $b, server $(args "$a"), client $(args "$b")"
# shellcheck disable=SC2046   # word splitting of the option string is intended
ibv_rc_pingpong $(args "$a") -p "$tcp_port" -n 100 &
srv=$!
n=0
until ss -Hltn 2>/dev/null | grep -q ":$tcp_port "; do
  n=$((n + 1))
  if [ $n -gt 200 ] || ! kill -0 $srv 2>/dev/null; then
    echo 'bed_rc_pingpong: server did not start listening' >&2
    kill $srv 2>/dev/null
    exit 1
  fi
  sleep 0.05
done
# shellcheck disable=SC2046
ibv_rc_pingpong $(args "$b") -p "$tcp_port" -n 100 localhost
cli=$?
wait $srv
srv_rc=$?
echo "bed_rc_pingpong: client exit $cli, server exit $srv_rc"
[ $cli -eq 0 ] && [ $srv_rc -eq 0 ]
