#!/usr/bin/env bash
# skip_status.sh CMD [ARGS...]: runs CMD (a GoogleTest binary, or the bed running one) with its
# output passed through, and maps the result for CTest's SKIP_RETURN_CODE 77:
#   CMD failed (any non-zero status)          -> that status: the test FAILS, whatever else it printed
#   CMD passed and printed "[  SKIPPED ]"      -> 77: reported as skipped (scripts/test refuses it)
#   CMD passed without a skip                  -> 0
# A SKIP_REGULAR_EXPRESSION on the output would instead report a binary with one failing and one
# skipped test as skipped (CTest checks the skip regex before the exit status), masking the failure.
set -uo pipefail
if [ $# -eq 0 ]; then
  echo "usage: skip_status.sh CMD [ARGS...]" >&2
  exit 2
fi
log=$(mktemp "${TMPDIR:-/tmp}/skip_status.XXXXXX") || exit 2
trap 'rm -f "$log"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
"$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
  exit "$rc"
fi
if grep -q '^\[  SKIPPED \]' "$log"; then
  echo "skip_status: the test passed but skipped some cases: reported as skipped (77)" >&2
  exit 77
fi
exit 0
