#!/usr/bin/env bash
# Unit test (label unit) of tests/gpu/kernel_rdma.sh: the kernel's RDMA settings read from its
# configuration (plain and gzip'ed), whether modules can be loaded, and the rxe plan run.sh's
# step 4 follows. Fake machines only (SLUICE_GPU_RUN_KCONFIG, _MODPROBE, _MODULES_DIR,
# _SYS_MODULE): nothing is loaded or created here.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/kernel_rdma.sh"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/modules" "$T/sys-empty" "$T/sys-rxe/rdma_rxe"
failures=0
# The H200 machine of issue 34, as its /proc/config.gz read.
cp "$HERE/kconfig/h200-firecracker.config" "$T/h200.config"
gzip -c "$T/h200.config" > "$T/h200.config.gz"
sed -e 's/^# CONFIG_RDMA_RXE is not set/CONFIG_RDMA_RXE=y/' "$T/h200.config" > "$T/rxe-y.config"
sed -e 's/^# CONFIG_RDMA_RXE is not set/CONFIG_RDMA_RXE=m/' -e 's/^# CONFIG_RDMA_SIW is not set/CONFIG_RDMA_SIW=m/' \
  "$T/h200.config" > "$T/rxe-m.config"
sed -e 's/^CONFIG_MODULES=y/# CONFIG_MODULES is not set/' "$T/rxe-m.config" > "$T/no-modules.config"

# case NAME KCONFIG MODPROBE MODULES_DIR SYS_MODULE PLAN-REGEX [SUMMARY-REGEX]
case_() {
  local name=$1 plan summary
  SLUICE_GPU_RUN_KCONFIG=$2 SLUICE_GPU_RUN_MODPROBE=$3 SLUICE_GPU_RUN_MODULES_DIR=$4 SLUICE_GPU_RUN_SYS_MODULE=$5
  export SLUICE_GPU_RUN_KCONFIG SLUICE_GPU_RUN_MODPROBE SLUICE_GPU_RUN_MODULES_DIR SLUICE_GPU_RUN_SYS_MODULE
  kernel_rdma_read
  plan=$(rxe_plan) summary=$(kernel_rdma_summary)
  local want_summary=ok
  if [ -n "${7:-}" ]; then
    grep -Eq -- "$7" <<< "$summary" || want_summary=no
  fi
  if grep -Eq -- "$6" <<< "$plan" && [ "$want_summary" = ok ]; then
    echo "ok   $name: $plan | $summary"
  else
    echo "FAIL $name: plan \"$plan\" (want /$6/), summary \"$summary\" (want /${7:-}/)"
    failures=$((failures + 1))
  fi
}
# No rxe in the kernel, no modprobe, no /lib/modules: the kernel's reason, exactly.
case_ h200 "$T/h200.config" "" "$T/no-such-modules" "$T/sys-empty" \
  '^no rdma_rxe is not in this kernel and it cannot load modules \(CONFIG_RDMA_RXE=unset, CONFIG_RDMA_SIW=unset; no .*/no-such-modules; no modprobe or insmod\)$' \
  '^CONFIG_INFINIBAND=y CONFIG_INFINIBAND_USER_ACCESS=y CONFIG_RDMA_RXE=unset CONFIG_RDMA_SIW=unset CONFIG_MLX5_INFINIBAND=y CONFIG_MODULES=y \(.*/h200.config\); modules: no .*/no-such-modules; no modprobe or insmod$'
case_ h200-gz "$T/h200.config.gz" "" "$T/no-such-modules" "$T/sys-empty" \
  '^no rdma_rxe is not in this kernel and it cannot load modules' \
  'CONFIG_RDMA_RXE=unset .*CONFIG_MLX5_INFINIBAND=y .*\(.*/h200.config.gz\)'
# Built in: `rdma link add` directly, whatever modprobe there is.
case_ rxe-builtin "$T/rxe-y.config" "" "$T/no-such-modules" "$T/sys-empty" '^link rdma_rxe is built in \(CONFIG_RDMA_RXE=y\)'
# A module, modprobe and /lib/modules present: modprobe, as before.
case_ rxe-module "$T/rxe-m.config" /bin/true "$T/modules" "$T/sys-empty" \
  '^modprobe modules can be loaded; CONFIG_RDMA_RXE=m, CONFIG_RDMA_SIW=m \(siw is iWARP' 'modules: can be loaded$'
# A module, but the kernel cannot load modules at all.
case_ no-modules "$T/no-modules.config" /bin/true "$T/modules" "$T/sys-empty" \
  '^no rdma_rxe is not in this kernel and it cannot load modules \(CONFIG_RDMA_RXE=m, .*; CONFIG_MODULES unset\)$'
# No RDMA in the kernel at all (this bed's kernel): said first.
sed -e 's/^CONFIG_INFINIBAND=y/# CONFIG_INFINIBAND is not set/' -e 's/^CONFIG_MODULES=y/# CONFIG_MODULES is not set/' \
  "$T/h200.config" > "$T/no-ib.config"
case_ no-infiniband "$T/no-ib.config" "" "$T/modules" "$T/sys-empty" \
  '^no rdma_rxe is not in this kernel and it cannot load modules \(CONFIG_INFINIBAND=unset \(no RDMA at all\), CONFIG_RDMA_RXE=unset, CONFIG_RDMA_SIW=unset; CONFIG_MODULES unset; no modprobe or insmod\)$'
# A module already loaded: no modprobe needed.
case_ rxe-loaded "$T/rxe-m.config" "" "$T/no-such-modules" "$T/sys-rxe" '^link rdma_rxe is loaded already'
# No configuration readable: modprobe where it can, else ask for the device (it may be built in).
case_ no-config-modprobe "$T/no-such-config" /bin/true "$T/modules" "$T/sys-empty" '^modprobe ' \
  'CONFIG_RDMA_RXE=\? .*no kernel configuration readable: SLUICE_GPU_RUN_KCONFIG='
case_ no-config-no-modprobe "$T/no-such-config" "" "$T/modules" "$T/sys-empty" \
  '^link the kernel.s configuration is unreadable, so rdma_rxe may be built in; modules cannot be loaded \(no modprobe or insmod\)$'
# run.sh acts on the plan: no modprobe unless the plan says so, and the plan's reason in step 4.
grep -q 'plan=$(rxe_plan)' "$HERE/run.sh" || { echo "FAIL run.sh does not follow rxe_plan"; failures=$((failures + 1)); }
if grep -nE '(^|[;&|(] *)(timeout [0-9]+ )?modprobe ' "$HERE/run.sh"; then
  echo "FAIL run.sh runs a bare modprobe (only \"\$KRDMA_MODPROBE\" when rxe_plan says so)"
  failures=$((failures + 1))
fi
echo "kernel_rdma_test: $failures failure(s)"
[ "$failures" = 0 ]
