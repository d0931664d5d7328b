#!/usr/bin/env bash
# expect_skip.sh REGEX... -- CMD [ARGS...]: runs CMD and passes only when it exits 77 (its GPU steps
# were skipped) and its output matches every REGEX (grep -E), i.e. it said why. Used by ctest to
# check that a gpu-check run which cannot move GPU memory reports "skipped, with the reason" and
# never "passed". Exit 0 as expected, 1 otherwise.
set -uo pipefail
pats=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do pats+=("$1"); shift; done
[ "${1:-}" = "--" ] || { echo "usage: expect_skip.sh REGEX... -- CMD [ARGS...]" >&2; exit 2; }
shift
out=$("$@" 2>&1); rc=$?
printf '%s\n' "$out"
bad=0
if [ "$rc" != 77 ]; then
  echo "expect_skip: exit $rc, expected 77 (skipped with the reason)" >&2
  bad=1
fi
for p in "${pats[@]}"; do
  if ! grep -Eq -- "$p" <<<"$out"; then
    echo "expect_skip: no line matches: $p" >&2
    bad=1
  fi
done
[ "$bad" = 0 ] && echo "expect_skip: exit 77 with the reason, as expected"
exit "$bad"
