#!/usr/bin/env bash
# tests/gpu/run.sh: the `gpu` label. Checks Sluice with real GPU memory, in well under 5 minutes:
#   1. cuda      cuInit, cuMemAlloc, host -> GPU -> host bytes, dma-buf export (gpu-check cuda)
#   2. detect    sluice-info's GPUDirect section (driver, per-GPU attributes, peermem, per-NIC
#                dma-buf probe and decision)
#   3. plugin    through the plugin's v12 table: regMrDmaBuf of an exported GPU buffer, GPU -> GPU
#                transfer (zero-copy when ptrSupport has CUDA, else staged as NCCL would), flush,
#                every byte verified on the GPU (gpu-check plugin)
#   4. nccl      NCCL all-reduce, two processes on one GPU posing as two hosts (NCCL_HOSTID differs),
#                NCCL_NET_PLUGIN=sluice NCCL_NET=Sluice NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1; the
#                result is checked and NCCL's INFO log must show "Using network Sluice"
# Steps 3 and 4 need an RDMA device: real ones, or Soft-RoCE on this kernel (scripts/rdma-bed --mode
# rxe, as root). Without either they are skipped with the reason and steps 1-2 still run.
#
# usage: tests/gpu/run.sh [--build DIR]       (default: ./build, configured with CUDA headers)
# Exit: 0 every check passed (some may be skipped with a reason), 1 a check failed, 77 no GPU here.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${SLUICE_BUILD_DIR:-$ROOT/build}
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
CHECK=$BUILD/tests/gpu-check
PLUGIN=$BUILD/plugin/libnccl-net-sluice.so
INFO=$BUILD/tools/sluice-info
ALLREDUCE=$BUILD/bench/nccl-allreduce
START=$(date +%s)
SUMMARY=()
FAILED=0
note() { SUMMARY+=("$1"); printf '%s\n' "== $1"; }
pass() { note "PASS $1"; }
fail() { note "FAIL $1"; FAILED=1; }
skip() { note "SKIP $1"; }
summary() {
  echo
  echo "== tests/gpu/run.sh summary ($(( $(date +%s) - START )) s) =="
  printf '  %s\n' "${SUMMARY[@]}"
}

# ---- Is there a GPU? -------------------------------------------------------------------------
if [ ! -e /dev/nvidiactl ] && [ ! -e /dev/nvidia0 ]; then
  skip "no GPU here: /dev/nvidiactl and /dev/nvidia0 do not exist (no NVIDIA driver or device)"
  summary
  exit 77
fi
for f in "$CHECK" "$PLUGIN" "$INFO"; do
  if [ ! -x "$f" ] && [ ! -f "$f" ]; then
    fail "missing $f: build first (cmake -S . -B $BUILD && cmake --build $BUILD; CUDA headers needed for gpu-check)"
    summary
    exit 1
  fi
done

# ---- 1. CUDA side -------------------------------------------------------------------------------
out=$(timeout 90 "$CHECK" cuda 2>&1); rc=$?
printf '%s\n' "$out"
if [ "$rc" = 77 ]; then
  skip "GPU device nodes exist but CUDA is unusable: $(printf '%s\n' "$out" | grep 'CHECK cuda_init' | head -1)"
  summary
  exit 77
fi
[ "$rc" = 0 ] && pass "cuda: cuMemAlloc, copies, dma-buf export ($(printf '%s\n' "$out" | grep -c ': PASS') checks passed, $(printf '%s\n' "$out" | grep -c ': SKIP') skipped)" \
              || fail "cuda: gpu-check cuda exit $rc: $(printf '%s\n' "$out" | grep ': FAIL' | head -2 | tr '\n' ' ')"

# ---- 2. Detection -------------------------------------------------------------------------------
text=$(timeout 60 "$INFO" 2>&1); rc=$?
printf '%s\n' "$text" | sed -n '/^GPUDirect RDMA/,/^Locked-memory/p'
if [ "$rc" != 0 ]; then
  fail "detect: sluice-info exit $rc"
elif printf '%s\n' "$text" | grep -q "^GPUDirect RDMA (SLUICE_GDR=[a-z]*): CUDA driver"; then
  pass "detect: sluice-info sees the CUDA driver and explains the GPUDirect decision per NIC"
else
  fail "detect: sluice-info does not report the CUDA driver although cuInit works"
fi

# ---- RDMA devices: real, or Soft-RoCE on this kernel --------------------------------------------
mode=$("$ROOT/scripts/rdma-bed" --print-mode 2>/dev/null || echo none)
case "$mode" in
  real) BED=("$ROOT/scripts/rdma-bed" --mode real --timeout 200 --) ;;
  rxe) BED=("$ROOT/scripts/rdma-bed" --mode rxe --timeout 200 --) ;;
  *)
    skip "plugin + nccl: no RDMA device here and rdma_rxe cannot be loaded on this kernel (the qemu bed has no GPU), so nothing can carry GPU data; CUDA-side checks above still ran"
    summary
    exit "$FAILED"
    ;;
esac
echo "== RDMA devices: $mode"

# ---- 3. GPU -> GPU through the plugin -----------------------------------------------------------
out=$("${BED[@]}" timeout 120 "$CHECK" plugin "$PLUGIN" 2>&1); rc=$?
printf '%s\n' "$out"
if [ "$rc" = 0 ]; then
  pass "plugin: $(printf '%s\n' "$out" | grep 'CHECK gpu_transfer' | sed 's/^CHECK gpu_transfer: PASS //')"
else
  fail "plugin: gpu-check plugin exit $rc: $(printf '%s\n' "$out" | grep ': FAIL' | head -3 | tr '\n' ' ')"
fi
dm=$(printf '%s\n' "$out" | grep 'CHECK dmabuf_register' | head -1)
[ -n "$dm" ] && note "INFO ${dm#CHECK }"

# ---- 4. NCCL end to end -------------------------------------------------------------------------
if [ ! -x "$ALLREDUCE" ]; then
  skip "nccl: $ALLREDUCE not built (needs the CUDA runtime and NCCL at configure time)"
  summary
  exit "$FAILED"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
port=$((29500 + RANDOM % 2000))
cat > "$tmp/ranks.sh" <<EOF
#!/usr/bin/env bash
# Two ranks on one GPU, each believing it is a different host.
common="NCCL_NET_PLUGIN=$PLUGIN NCCL_NET=Sluice NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 LOCAL_RANK=0"
env \$common RANK=0 NCCL_HOSTID=sluice-gpu-test-host0 timeout 150 "$ALLREDUCE" -b 8 -e 64M -f 4 -n 3 -w 1 --timeout 120 > "$tmp/rank0.log" 2>&1 &
p0=\$!
env \$common RANK=1 NCCL_HOSTID=sluice-gpu-test-host1 timeout 150 "$ALLREDUCE" -b 8 -e 64M -f 4 -n 3 -w 1 --timeout 120 > "$tmp/rank1.log" 2>&1 &
p1=\$!
wait \$p0; r0=\$?
wait \$p1; r1=\$?
echo "rank0 exit \$r0, rank1 exit \$r1"
[ "\$r0" = 0 ] && [ "\$r1" = 0 ]
EOF
chmod +x "$tmp/ranks.sh"
"${BED[@]}" "$tmp/ranks.sh"; rc=$?
grep -v "NCCL INFO" "$tmp/rank0.log" | tail -20
using=$(grep -h "Using network Sluice" "$tmp/rank0.log" "$tmp/rank1.log" | head -1)
gdr=$(grep -h "via NET/Sluice" "$tmp/rank0.log" | head -2)
grep -h "GPUDirect RDMA" "$tmp/rank0.log" | head -2
[ -n "$gdr" ] && printf '%s\n' "$gdr"
if [ "$rc" != 0 ]; then
  fail "nccl: all-reduce between two processes failed (exit $rc; wrong results make nccl-allreduce exit 1); last lines: $(tail -3 "$tmp/rank0.log" | tr '\n' ' ')"
elif [ -z "$using" ]; then
  fail "nccl: all-reduce passed but NCCL's log has no \"Using network Sluice\": another transport carried it"
else
  how=staged
  printf '%s\n' "$gdr" | grep -q GDRDMA && how="GPUDirect RDMA (GDRDMA)"
  pass "nccl: all-reduce 8 B..64 MiB correct on both ranks, \"Using network Sluice\", channels $how"
fi
summary
exit "$FAILED"
