#!/usr/bin/env bash
# check.sh SKIP_STATUS FIXTURE: the exit status skip_status.sh gives for each mix of passing,
# failing and skipping tests in one GoogleTest binary. A failure next to a skip must stay a failure.
set -u
wrap=$1
fixture=$2
fail=0
expect() {  # expect STATUS FILTER
  local want=$1 filter=$2
  "$wrap" "$fixture" --gtest_filter="$filter" >/dev/null 2>&1
  local got=$?
  if [ "$got" -ne "$want" ]; then
    echo "FAIL: --gtest_filter=$filter: exit $got, expected $want" >&2
    fail=1
  else
    echo "ok: --gtest_filter=$filter: exit $got"
  fi
}
expect 0 'SkipFixture.Passes'
expect 77 'SkipFixture.Skips'
expect 77 'SkipFixture.Passes:SkipFixture.Skips'
expect 1 'SkipFixture.Fails'
expect 1 'SkipFixture.Fails:SkipFixture.Skips'
expect 1 'SkipFixture.*'
# A command that fails with another status keeps it (the bed's 124 timeout, 125 set-up failure).
"$wrap" sh -c 'echo "[  SKIPPED ] 1 test"; exit 124' >/dev/null 2>&1
got=$?
if [ "$got" -ne 124 ]; then
  echo "FAIL: a command exiting 124 after printing a skip: exit $got, expected 124" >&2
  fail=1
else
  echo "ok: exit 124 with a skip printed stays 124"
fi
exit "$fail"
