#!/usr/bin/env bash
# check_core_layers.cmake must catch a wrong-way include: in a copy of core/, the data path is made
# to include connection setup, and base to include the comm; the check must fail naming both.
set -euo pipefail
core=$1
script=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$core" "$tmp/core"
printf '#include "connect/comm_setup.h"\n' >> "$tmp/core/src/datapath/send.cc"
printf '#include "comm/comm.h"\n' >> "$tmp/core/src/base/wire.cc"
set +e
out=$(cmake -DCORE_DIR="$tmp/core" -P "$script" 2>&1)
rc=$?
set -e
if [ "$rc" -eq 0 ]; then
  echo "check_core_layers passed a tree whose data path includes connect/: $out" >&2
  exit 1
fi
for want in "datapath/send.cc: includes connect/comm_setup.h" "base/wire.cc: includes comm/comm.h"; do
  if ! grep -qF "$want" <<<"$out"; then
    echo "check_core_layers failed without naming '$want':" >&2
    echo "$out" >&2
    exit 1
  fi
done
echo "check_core_layers caught both wrong-way includes"
