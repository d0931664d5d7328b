#!/bin/sh
# bench_verify_and_trace.sh BENCH CHECK_TRACE ARGS...: one bed boot for two sluice-bench checks.
# 1. BENCH ARGS... (the verified run); 2. a short message-rate run with --trace (the example
# profiler, tools/trace_profiler.cc), whose Chrome trace must parse as JSON with one track per QP
# (tools/check_trace.py): sender and receiver each have at least one QP.
bench=$1
check=$2
shift 2
"$bench" "$@" || exit 1
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
"$bench" --tests rate --rate-max 4K --iters 50 --warmup-frac 0 --timeout 120 --quiet \
  --no-count --trace "$dir/trace.json" || exit 1
python3 "$check" "$dir/trace.json" --min-tracks 2 --min-events 200
