#!/usr/bin/env bash
# Unit test (label unit) of run.sh's NCCL verdicts (tests/gpu/nccl_log.sh) on sample NCCL logs
# (tests/gpu/nccl-logs, NCCL 2.28's own line formats): GDRDMA channels read as GPUDirect RDMA, not
# "staged"; the proof comes from NCCL_DEBUG_FILE's files, never from the processes' stdout; NCCL's
# refusal without RDMA devices is recognised exactly; another transport is a failure.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/nccl_log.sh"
L=$HERE/nccl-logs
failures=0
expect() {  # expect NAME RC REGEX FILE...
  local name=$1 want=$2 re=$3
  shift 3
  local out rc
  out=$(nccl_log_verdict "$@"); rc=$?
  if [ "$rc" = "$want" ] && grep -Eq -- "$re" <<<"$out"; then
    echo "ok   $name: $out"
  else
    echo "FAIL $name: rc $rc (want $want), \"$out\" does not match /$re/"
    failures=$((failures + 1))
  fi
}
expect gdrdma 0 '^8 channel\(s\) via NET/Sluice, GPUDirect RDMA \(every channel /GDRDMA\); GPU Direct RDMA lines: 3 Enabled, 0 Disabled$' \
  "$L/gdrdma.rank0.log" "$L/gdrdma.rank1.log"
expect staged 0 'staged through host memory \(no channel /GDRDMA\); GPU Direct RDMA lines: 0 Enabled, 1 Disabled' \
  "$L/staged.rank0.log"
expect mixed 0 'mixed \(4 of 6 channels /GDRDMA\)' "$L/gdrdma.rank0.log" "$L/staged.rank0.log"
# The processes' stdout has look-alike lines: only NCCL_DEBUG_FILE's files count.
expect stdout-ignored 1 '^no NCCL log file' "$L/staged.stdout.missing"
expect stdout-is-not-proof 1 'lacks the proof' "$L/staged.stdout"
expect refused 2 '^NCCL refused: "Failed to initialize any NET plugin"' "$L/refused.rank0.log"
expect fallback-ib 1 '2 channel line\(s\) not via NET/Sluice' "$L/fallback-ib.rank0.log"
expect p2p 1 '1 channel line\(s\) not via NET/Sluice' "$L/p2p.rank0.log"
# The counts themselves.
nccl_log_scan "$L/gdrdma.rank0.log" "$L/gdrdma.rank1.log"
[ "$NCCL_LOADED" -ge 2 ] && [ "$NCCL_USING" -ge 2 ] && [ "$NCCL_VIA_GDR" = 8 ] ||
  { echo "FAIL scan: loaded $NCCL_LOADED using $NCCL_USING via_gdr $NCCL_VIA_GDR"; failures=$((failures + 1)); }
# run.sh itself must read NCCL_DEBUG_FILE's files and NCCL's spelling.
grep -q 'NCCL_DEBUG_FILE=' "$HERE/run.sh" || { echo "FAIL run.sh sets no NCCL_DEBUG_FILE"; failures=$((failures + 1)); }
if grep -n 'GPUDirect RDMA"' "$HERE/run.sh" "$HERE/nccl_log.sh" | grep -v '^.*#' | grep grep >/dev/null; then
  echo "FAIL a grep for NCCL's \"GPUDirect RDMA\" (NCCL writes \"GPU Direct RDMA\")"
  failures=$((failures + 1))
fi
echo "nccl_log_test: $failures failure(s)"
[ "$failures" = 0 ]
