#!/bin/sh
# with_test_devices.sh CMD [ARGS...]: runs CMD with the plugin restricted to the test's port pair
# (SLUICE_TEST_DEVICES, else the first two ACTIVE ports; see test_devices.sh) through NCCL_IB_HCA,
# so benchmarks that pick plugin devices by index (0 and 1) run on exactly that pair. One port
# (loopback) leaves a single device, which the benchmarks then use for both sides.
. "$(dirname "$0")/test_devices.sh"
ports=$(sluice_test_ports) || exit 1
set -- $ports "$@"
a=$1
b=$2
shift 2
if [ "$a" = "$b" ]; then
  NCCL_IB_HCA="=$a"
else
  NCCL_IB_HCA="=$a,$b"
fi
export NCCL_IB_HCA
echo "with_test_devices: NCCL_IB_HCA=$NCCL_IB_HCA" >&2
exec "$@"
