#!/bin/sh
# rdma test: run sluice-info on the live test bed (inside scripts/rdma-bed) and check that it lists
# the test pair's devices (tests/rdma/test_devices.sh: SLUICE_TEST_DEVICES, else the first two
# ACTIVE ports) from verbs, in text and in JSON, whatever their names and link layer.
# usage: check_info_bed.sh path/to/sluice-info
set -u
info=${1:?usage: $0 path/to/sluice-info}
# shellcheck source=tests/rdma/test_devices.sh
. "$(dirname "$0")/../tests/rdma/test_devices.sh"
ports=$(sluice_test_ports) || exit 1
text=$("$info") || { echo "sluice-info failed (exit $?)"; exit 1; }
printf '%s\n' "$text"
json=$("$info" --json) || { echo "sluice-info --json failed (exit $?)"; exit 1; }
devs=""
for p in $ports; do
  dev=${p%:*}
  case " $devs " in *" $dev "*) continue ;; esac
  devs="$devs${devs:+ }$dev"
  printf '%s\n' "$text" | grep -Eq "^  $dev  " || { echo "FAIL: $dev not listed by sluice-info"; exit 1; }
  printf '%s\n' "$json" | grep -q "\"name\": \"$dev\", \"source\": \"verbs\"" ||
    { echo "FAIL: $dev missing from sluice-info --json rdma_devices"; exit 1; }
done
# GPUDirect: every test device was probed for dma-buf for real, and the decision says why not.
ndev=$(echo $devs | wc -w)
n_probe=$(printf '%s
' "$text" | grep -c "dma-buf probe: ibv_reg_dmabuf_mr(fd -1) on ")
[ "$n_probe" -ge "$ndev" ] ||
  { echo "FAIL: GPUDirect section lacks the per-device dma-buf probe ($n_probe of $ndev)"; exit 1; }
printf '%s
' "$text" | grep -q "NCCL stages GPU data through host memory" ||
  { echo "FAIL: GPUDirect section does not say that NCCL stages through host memory"; exit 1; }
printf '%s
' "$json" | grep -q '"dmabuf_probe": "ibv_reg_dmabuf_mr(fd -1) on ' ||
  { echo "FAIL: sluice-info --json lacks gpudirect.devices[].dmabuf_probe"; exit 1; }
# Connection manager: every port says what SLUICE_CM=auto picks and why, in text and JSON.
n_cm=$(printf '%s\n' "$text" | grep -Ec "connection manager: (rdmacm|oob) \(SLUICE_CM=")
[ "$n_cm" -ge "$ndev" ] || { echo "FAIL: $n_cm of $ndev ports say which connection manager"; exit 1; }
printf '%s\n' "$json" | grep -Eq '"cm": "(rdmacm|oob)", "cm_reason": "SLUICE_CM=' ||
  { echo "FAIL: sluice-info --json lacks ports[].cm / cm_reason"; exit 1; }
echo "PASS: sluice-info lists $devs (test ports $ports) and explains GPUDirect for each"
