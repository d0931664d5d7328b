#!/bin/sh
# rdma test (label `bed`): the suite does not depend on device names. Runs inside a bed whose
# Soft-RoCE devices were created under other names (tests/rdma/renamed.cmake sets
# SLUICE_BED_RXE_NAMES=mlx5_0,mlx5_1) a representative subset: QP bring-up, init/config, the plugin's
# data path cross-device and loopback, sluice-info and ibv_rc_pingpong with SLUICE_TEST_DEVICES
# unset (the first two active ports); QP bring-up, the data path and ibv_rc_pingpong again with it
# set to the pair in reverse order; and checks that a SLUICE_TEST_DEVICES naming a missing port
# fails instead of skipping. One VM boot; keep it short (CI runs it).
# usage: renamed_devices.sh NAME_A NAME_B QP_BRINGUP_TEST PLUGIN_CONFIG_TEST PLUGIN_RDMA_TEST SLUICE_INFO
set -u
[ $# -eq 6 ] || { echo "usage: $0 NAME_A NAME_B qp_bringup_test plugin_config_test plugin_rdma_test sluice-info" >&2; exit 2; }
name_a=$1 name_b=$2 qp=$3 cfg=$4 plug=$5 info=$6
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
fail=0
step() {  # description, command...
  d=$1
  shift
  echo "== renamed_devices: $d"
  if "$@"; then echo "== renamed_devices: PASS $d"; else
    echo "== renamed_devices: FAIL $d (exit $?)"
    fail=1
  fi
}

echo "== renamed_devices: bed mode ${SLUICE_BED_MODE:-?}, devices ${SLUICE_BED_DEVICES:-?}"
ls /sys/class/infiniband
for n in "$name_a" "$name_b"; do
  [ -e "/sys/class/infiniband/$n" ] || { echo "FAIL: the bed has no device $n (SLUICE_BED_RXE_NAMES not honoured)"; exit 1; }
done
for d in /sys/class/infiniband/rxe*; do
  [ -e "$d" ] && { echo "FAIL: $d exists: the bed still created an rxe* device"; exit 1; }
done

plugin_subset='Pairs/Transfer.AllSizesEveryByteVerified/*:Pairs/Grouped.*:Abi/Versions.SendRecvThroughTable/v12:Validation.UnknownDeviceIndex'
run_subset() {  # label, full (1: also the init/config and sluice-info steps)
  step "qp_bringup_test ($1)" "$qp"
  [ "$2" = 1 ] && step "plugin_config_test ($1)" "$cfg" --gtest_filter='*GidIndex*:*HcaExclude*:*UnknownHca*'
  step "plugin_rdma_test subset ($1)" "$plug" --gtest_filter="$plugin_subset"
  [ "$2" = 1 ] && step "sluice-info ($1)" "$src/tools/check_info_bed.sh" "$info"
  step "ibv_rc_pingpong ($1)" "$here/bed_rc_pingpong.sh"
}

unset SLUICE_TEST_DEVICES
run_subset "SLUICE_TEST_DEVICES unset" 1
SLUICE_TEST_DEVICES="$name_b:1,$name_a:1"
export SLUICE_TEST_DEVICES
run_subset "SLUICE_TEST_DEVICES=$SLUICE_TEST_DEVICES" 0

# A pair that does not exist here must fail the tests, never skip them.
SLUICE_TEST_DEVICES="no_such_dev:1,$name_a:1"
out=$("$qp" --gtest_filter='QpBringup.RtsBeforeRtrIsRefused' 2>&1)
rc=$?
# This step fails on purpose: its output is shown marked, so a log reader does not take it for a
# real failure.
printf '%s\n' "$out" | tail -n 5 | sed 's/^/[expected] /'
if [ $rc -ne 0 ] && printf '%s\n' "$out" | grep -q "no_such_dev:1 is not an ACTIVE RDMA port" &&
   ! printf '%s\n' "$out" | grep -q "SKIPPED"; then
  echo "== renamed_devices: PASS a missing SLUICE_TEST_DEVICES port fails the test"
else
  echo "== renamed_devices: FAIL a missing SLUICE_TEST_DEVICES port did not fail the test (exit $rc)"
  fail=1
fi
if sh -c ". '$here/test_devices.sh'; sluice_test_ports" >/dev/null 2>&1; then
  echo "== renamed_devices: FAIL test_devices.sh accepted no_such_dev:1"
  fail=1
fi
[ $fail -eq 0 ] && echo "renamed_devices: all steps passed with devices $name_a $name_b"
exit $fail
