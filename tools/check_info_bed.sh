#!/bin/sh
# rdma test: run sluice-info on the live test bed (inside scripts/rdma-bed) and check that it lists
# the Soft-RoCE devices rxe0 and rxe1 from verbs, in text and in JSON.
# usage: check_info_bed.sh path/to/sluice-info
set -u
info=${1:?usage: $0 path/to/sluice-info}
text=$("$info") || { echo "sluice-info failed (exit $?)"; exit 1; }
printf '%s\n' "$text"
json=$("$info" --json) || { echo "sluice-info --json failed (exit $?)"; exit 1; }
for dev in rxe0 rxe1; do
  printf '%s\n' "$text" | grep -Eq "^  $dev  " || { echo "FAIL: $dev not listed by sluice-info"; exit 1; }
  printf '%s\n' "$json" | grep -q "\"name\": \"$dev\", \"source\": \"verbs\"" ||
    { echo "FAIL: $dev missing from sluice-info --json rdma_devices"; exit 1; }
done
# GPUDirect: every live device was probed for dma-buf for real, and the decision says why not.
n_probe=$(printf '%s\n' "$text" | grep -c "dma-buf probe: ibv_reg_dmabuf_mr(fd -1) on ")
[ "$n_probe" -ge 2 ] || { echo "FAIL: GPUDirect section lacks the per-device dma-buf probe"; exit 1; }
printf '%s\n' "$text" | grep -q "NCCL stages GPU data through host memory" ||
  { echo "FAIL: GPUDirect section does not say that NCCL stages through host memory"; exit 1; }
printf '%s\n' "$json" | grep -q '"dmabuf_probe": "ibv_reg_dmabuf_mr(fd -1) on ' ||
  { echo "FAIL: sluice-info --json lacks gpudirect.devices[].dmabuf_probe"; exit 1; }
echo "PASS: sluice-info lists rxe0 and rxe1 and explains GPUDirect for each"
