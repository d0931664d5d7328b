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
# Fabric features (issue 21): per device the relaxed-ordering decision and the ECE answer, per port
# the adaptive-routing decision, and which rdma-core entry points were found.
for dev in $devs; do
  printf '%s\n' "$text" | grep -Eq "^  $dev: PCIe relaxed ordering (on|off): NCCL_IB_PCI_RELAXED_ORDERING=" ||
    { echo "FAIL: no relaxed-ordering decision for $dev"; exit 1; }
  printf '%s\n' "$text" | grep -Eq "^  $dev: ECE " || { echo "FAIL: no ECE line for $dev"; exit 1; }
  printf '%s\n' "$text" | grep -Eq "^  $dev:[0-9]+: adaptive routing (on|off): NCCL_IB_ADAPTIVE_ROUTING" ||
    { echo "FAIL: no adaptive-routing decision for $dev"; exit 1; }
  # SLUICE_FLOW_LABEL (issue 24), per port: the bed's ports are RoCE, the default is auto
  printf '%s\n' "$text" | grep -Eq "^  $dev:[0-9]+: flow labels (auto|off|seed 0x[0-9a-f]+|do not apply)(:| )" ||
    { echo "FAIL: no flow-label line for $dev"; exit 1; }
  case "$dev" in rxe*)  # rxe: the probe registers with the optional flag; no ECE (EOPNOTSUPP)
    printf '%s\n' "$text" | grep -q "^  $dev: PCIe relaxed ordering on: " ||
      { echo "FAIL: $dev: relaxed ordering should be on (the probe registers on rxe)"; exit 1; }
    printf '%s\n' "$text" | grep -q "^  $dev: ECE not used: ibv_query_ece: .*(errno 95)" ||
      { echo "FAIL: $dev: ECE should be skipped with EOPNOTSUPP"; exit 1; } ;;
  esac
done
printf '%s\n' "$text" | grep -q "^Fabric features: rdma-core entry points beyond the floor" ||
  { echo "FAIL: no rdma-core entry-point line"; exit 1; }
printf '%s\n' "$json" | grep -q '"fabric": {"rdma_core": ' ||
  { echo "FAIL: sluice-info --json lacks fabric"; exit 1; }
# Standby (SLUICE_STANDBY, docs/standby.md): off by default, and every test device's would-be
# standby with its reason; with SLUICE_STANDBY=1 it is on, and of the bed's two rxe devices each has
# the other.
printf '%s\n' "$text" | grep -q "^Standby (.*): off (SLUICE_STANDBY=0); with SLUICE_STANDBY=1" ||
  { echo "FAIL: no standby section saying it is off"; exit 1; }
printf '%s\n' "$json" | grep -q '"standby": {"on": false, "state": "off (SLUICE_STANDBY=0)"' ||
  { echo "FAIL: sluice-info --json lacks standby"; exit 1; }
on_text=$(SLUICE_STANDBY=1 "$info") || { echo "sluice-info failed"; exit 1; }
printf '%s\n' "$on_text" | grep -q "^Standby (.*): on (SLUICE_STANDBY=1)" ||
  { echo "FAIL: SLUICE_STANDBY=1 does not turn the standby on in sluice-info"; exit 1; }
for dev in $devs; do
  printf '%s\n' "$on_text" | grep -Eq "^  $dev(:[0-9]+)?: standby [^ ]+: " ||
    { echo "FAIL: no standby line for $dev"; exit 1; }
done
set -- $devs
if [ "$ndev" -eq 2 ] && case "$1$2" in rxe*rxe*) true ;; *) false ;; esac; then
  printf '%s\n' "$on_text" | grep -Eq "^  $1(:[0-9]+)?: standby $2(:[0-9]+)?: " ||
    { echo "FAIL: $1's standby is not $2"; exit 1; }
  printf '%s\n' "$on_text" | grep -Eq "^  $2(:[0-9]+)?: standby $1(:[0-9]+)?: " ||
    { echo "FAIL: $2's standby is not $1"; exit 1; }
fi
# On an rdma-core without ibv_reg_dmabuf_mr (before 34; simulated: SLUICE_TEST_HIDE_VERBS) the
# GPUDirect decision says so for every device.
old_text=$(SLUICE_TEST_HIDE_VERBS=ibv_reg_dmabuf_mr "$info") || { echo "sluice-info failed"; exit 1; }
n_old=$(printf '%s\n' "$old_text" | grep -c "dma-buf probe: no dma-buf (rdma-core too old)")
[ "$n_old" -ge "$ndev" ] ||
  { echo "FAIL: without ibv_reg_dmabuf_mr, $n_old of $ndev devices say 'rdma-core too old'"; exit 1; }
echo "PASS: sluice-info lists $devs (test ports $ports) and explains GPUDirect for each"
