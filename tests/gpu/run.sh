#!/usr/bin/env bash
# tests/gpu/run.sh: Sluice on a GPU machine, one command of at most 5 minutes (label `gpu`).
#   1. facts   GPU, driver, kernel, CUDA/PyTorch/NCCL runtime, /dev/infiniband, the RDMA ports and
#              their states, ulimit -l, nvidia_peermem, where the wheel's libnccl.so.2 is, and the
#              kernel's RDMA configuration (/proc/config.gz or /boot/config-<release>:
#              CONFIG_INFINIBAND, _INFINIBAND_USER_ACCESS, _RDMA_RXE, _RDMA_SIW, _MLX5_INFINIBAND,
#              _MODULES) with whether it can load modules at all (tests/gpu/kernel_rdma.sh)
#   2. cuda    gpu-check cuda: cuMemAlloc and cuMem* (NCCL's allocator), copies, dma-buf export
#   3. gdr     the GPUDirect decision, from sluice-info --json
#   4. rdma    where an RDMA device has an ACTIVE port: gpu-check plugin in loopback on the port
#              nearest the GPU (GPU memory registered both ways, GPU -> GPU through the plugin with
#              every byte checked, the flush). Where no device exists, Soft-RoCE as far as the
#              kernel allows (rdma_rxe built in or loaded: `rdma link add` at once; a module with
#              modprobe and /lib/modules: modprobe first; neither: nothing is tried), else the
#              reason: "rdma_rxe is not in this kernel and it cannot load modules (...)" when so
#   5. nccl    PyTorch's NCCL end to end: two processes on the one GPU posing as two hosts
#              (NCCL_HOSTID), NCCL_NET_PLUGIN=<plugin> NCCL_NET=Sluice NCCL_P2P_DISABLE=1
#              NCCL_SHM_DISABLE=1; all-reduce checked over sizes and dtypes (nccl_torch.py); the
#              proof read from NCCL_DEBUG_FILE's files (nccl_log.sh). Without an RDMA device the
#              expected result is NCCL's "Failed to initialize any NET plugin", reported as such
#   6. summary one line a step: PASS / FAIL / SKIP with its reason
#
# usage: tests/gpu/run.sh --bundle DIR     (scripts/gpu-bundle's folder: a machine without a build)
#        tests/gpu/run.sh [--build DIR]    (a build tree, default ./build)
# Ports: the plugin offers only ACTIVE ports. SLUICE_TEST_DEVICES=dev[:port][,dev[:port]] (as for
# scripts/test) limits steps 3-5 to those ports through NCCL_IB_HCA (an NCCL_IB_HCA already set
# wins); unset, step 4 takes the ACTIVE port nearest the GPU and NCCL chooses as it would.
# rdma-core with --bundle: the machine's own libibverbs, librdmacm and providers where it has them
# (a libibverbs.so.1 with the versions MANIFEST names, and /etc/libibverbs.d); the bundle's
# (lib/rdma-core, its rxe and mlx5 providers through RDMAV_DRIVERS) only where it has none.
# SLUICE_GPU_RUN_RDMA_CORE=system|bundle forces the choice.
# Logs: $OUT/gpu-run/ ($OUT defaults to a new temporary folder). SLUICE_GPU_RUN_NO_RXE=1 loads no
# module and creates no rxe device (rehearsals on a shared host; step 4 still gives the kernel's
# reason). SLUICE_GPU_RUN_PYTHON names the Python that has torch (default python3);
# SLUICE_GPU_RUN_TORCH_SCRIPT replaces nccl_torch.py (the rehearsal passes tests/gpu/standin_torch.py
# where PyTorch is missing).
# Rehearsals and tests only, describing a machine other than this one: SLUICE_GPU_RUN_KCONFIG=FILE
# (the kernel configuration), SLUICE_GPU_RUN_MODPROBE=PATH ("" = no modprobe and no insmod),
# SLUICE_GPU_RUN_MODULES_DIR (for /lib/modules/<release>), SLUICE_GPU_RUN_SYS_MODULE (for
# /sys/module), SLUICE_GPU_RUN_DEV_IB (for /dev/infiniband), SLUICE_SYS_IB (for
# /sys/class/infiniband).
# Every step has its own time limit (10+30+45+20+75+100 s: under 5 minutes in all).
# Exit: 0 when steps 4 and 5 passed; 1 when a step failed; 77 otherwise (no GPU, or steps 4/5
# skipped with their reasons).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$HERE/nccl_log.sh"
. "$HERE/kernel_rdma.sh"
. "$ROOT/tests/rdma/test_devices.sh"
DEV_IB=${SLUICE_GPU_RUN_DEV_IB:-/dev/infiniband}
SYS_IB=$SLUICE_SYS_IB
BUNDLE="" BUILD=${SLUICE_BUILD_DIR:-$ROOT/build}
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) BUNDLE=$(cd "$2" && pwd) || exit 2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
START=$(date +%s)
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/sluice-gpu.XXXXXX")}
LOG=$OUT/gpu-run
mkdir -p "$LOG/nccl" || exit 2
PY=${SLUICE_GPU_RUN_PYTHON:-python3}
TORCH_SCRIPT=${SLUICE_GPU_RUN_TORCH_SCRIPT:-$HERE/nccl_torch.py}
if [ -n "$BUNDLE" ]; then
  CHECK=$BUNDLE/bin/gpu-check INFO=$BUNDLE/bin/sluice-info RDMA_TOOL=$BUNDLE/bin/rdma
  PLUGIN=$BUNDLE/lib/libnccl-net-sluice.so
  # The bundle's libstdc++/libgcc_s only where the machine's libstdc++ lacks the GLIBCXX version
  # ours need (the bundled one needs the build host's glibc: MANIFEST).
  need=$(sed -n 's/^glibcxx: //p' "$BUNDLE/MANIFEST" 2>/dev/null)
  sys=$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
  CXX_NOTE="system libstdc++ ${sys:-none} has ${need:-?}"
  if [ -z "$sys" ] || [ -z "$need" ] || ! grep -qa "$need" "$sys"; then
    CXX_DIR=$BUNDLE/lib/cxx: CXX_NOTE="bundle's libstdc++ (system ${sys:-none} lacks ${need:-?})"
  fi
  # rdma-core: the machine's own where it has one (its libibverbs reads its /etc/libibverbs.d and
  # loads its providers, matched to its kernel and NICs: a cluster node's rdma-core or DOCA/OFED);
  # the bundle's only where it has none. Mixing them (the bundle's providers through RDMAV_DRIVERS
  # into the machine's libibverbs, or the bundle's libibverbs over the machine's providers) is
  # what must not happen.
  RDMA_CORE=${SLUICE_GPU_RUN_RDMA_CORE:-auto}
  sys_verbs=$(ldconfig -p 2>/dev/null | awk '/libibverbs\.so\.1 .*x86-64/ {print $NF; exit}')
  sys_cm=$(ldconfig -p 2>/dev/null | awk '/librdmacm\.so\.1 .*x86-64/ {print $NF; exit}')
  verbs_need=$(sed -n 's/^rdma-core needs: //p' "$BUNDLE/MANIFEST" 2>/dev/null)
  if [ "$RDMA_CORE" = auto ]; then
    RDMA_CORE=system RDMA_CORE_NOTE="the machine's ($sys_verbs, $sys_cm, /etc/libibverbs.d)"
    if [ -z "$sys_verbs" ] || [ -z "$sys_cm" ]; then
      RDMA_CORE=bundle RDMA_CORE_NOTE="the bundle's (the machine has no libibverbs.so.1 or librdmacm.so.1)"
    elif ! ls /etc/libibverbs.d/*.driver > /dev/null 2>&1; then
      RDMA_CORE=bundle RDMA_CORE_NOTE="the bundle's (the machine's $sys_verbs has no /etc/libibverbs.d/*.driver: no providers)"
    else
      for v in $verbs_need; do  # IBVERBS_1.n in libibverbs, RDMACM_1.n in librdmacm
        f=$sys_verbs
        [ "${v#RDMACM_}" != "$v" ] && f=$sys_cm
        if ! grep -qa "$v" "$f"; then
          RDMA_CORE=bundle RDMA_CORE_NOTE="the bundle's (the machine's $sys_verbs / $sys_cm lack $v)"
          break
        fi
      done
    fi
  else
    RDMA_CORE_NOTE="the $([ "$RDMA_CORE" = bundle ] && echo "bundle's" || echo "machine's") (SLUICE_GPU_RUN_RDMA_CORE=$RDMA_CORE)"
  fi
  RDMA_CORE_DIR=""
  [ "$RDMA_CORE" = bundle ] && RDMA_CORE_DIR=$BUNDLE/lib/rdma-core:
  export LD_LIBRARY_PATH=$RDMA_CORE_DIR$BUNDLE/lib:${CXX_DIR:-}${LD_LIBRARY_PATH:-}
  LD_LIBRARY_PATH=${LD_LIBRARY_PATH%:}
  if [ "$RDMA_CORE" = bundle ]; then
    # Its providers (rdma-core's load_driver appends "-rdmav34.so" to an absolute name): the
    # bundle's libibverbs reads only its compiled-in /etc/libibverbs.d, which this machine lacks.
    # With the machine's own rdma-core, RDMAV_DRIVERS stays as the user has it (normally unset).
    export RDMAV_DRIVERS=$BUNDLE/lib/libibverbs/librxe:$BUNDLE/lib/libibverbs/libmlx5
  fi
  # hwloc's PCI plugin, from the bundle (its libhwloc is the bundle's too).
  export HWLOC_PLUGINS_PATH=$BUNDLE/lib/hwloc
else
  CHECK=$BUILD/tests/gpu-check INFO=$BUILD/tools/sluice-info RDMA_TOOL=$(command -v rdma || true)
  for t in /sbin/rdma /usr/sbin/rdma /bin/rdma; do [ -z "$RDMA_TOOL" ] && [ -x "$t" ] && RDMA_TOOL=$t; done
  PLUGIN=$BUILD/plugin/libnccl-net-sluice.so
  RDMA_CORE_NOTE="the machine's (a build tree)"
fi
STEPS=() VERDICTS=() REASONS=()
record() {  # record STEP VERDICT REASON
  STEPS+=("$1") VERDICTS+=("$2") REASONS+=("$3")
  printf '== %-6s %-4s %s\n' "$1" "$2" "$3" | tee -a "$LOG/summary.txt"
}
verdict_of() { local i; for i in "${!STEPS[@]}"; do [ "${STEPS[$i]}" = "$1" ] && echo "${VERDICTS[$i]}"; done; }
finish() {
  {
    echo
    echo "== tests/gpu/run.sh summary ($(( $(date +%s) - START )) s; logs in $LOG) =="
    printf '  %-2s %-6s %-4s %s\n' "#" step verdict reason
    local i
    for i in "${!STEPS[@]}"; do
      printf '  %-2s %-6s %-4s %s\n' "$((i + 1))" "${STEPS[$i]}" "${VERDICTS[$i]}" "${REASONS[$i]}"
    done
  } | tee "$LOG/table.txt"
  local rc=77 v
  for v in "${VERDICTS[@]}"; do [ "$v" = FAIL ] && rc=1; done
  [ "$rc" = 77 ] && [ "$(verdict_of rdma)" = PASS ] && [ "$(verdict_of nccl)" = PASS ] && rc=0
  echo "exit $rc" | tee -a "$LOG/table.txt"
  exit "$rc"
}
first() { grep -m1 -E -- "$1" "$2" | sed -E 's/^CHECK [a-z_]+: (PASS|FAIL|SKIP) //'; }
port_states() {  # "dev:port STATE link_layer, ..." for every port under $SYS_IB, or "none"
  local d p st out=""
  for d in "$SYS_IB"/*; do
    [ -d "$d/ports" ] || continue
    for p in $(ls "$d/ports" | sort -n); do
      st=$(sed -E 's/^[0-9]+: *//' "$d/ports/$p/state" 2>/dev/null)
      out+="${out:+, }${d##*/}:$p ${st:-?} $(cat "$d/ports/$p/link_layer" 2>/dev/null)"
    done
  done
  echo "${out:-none}"
}
usable_uverbs() { local d; for d in "$DEV_IB"/uverbs*; do [ -r "$d" ] && [ -w "$d" ] && return 0; done; return 1; }
kernel_rdma_read

# ---- 1. facts ---------------------------------------------------------------------------------
{
  echo "date: $(date -u +%FT%TZ)  host: $(hostname)  kernel: $(uname -r)  user: $(id -un)"
  echo "bundle: ${BUNDLE:-none (build $BUILD)}"; [ -n "$BUNDLE" ] && sed -n '2,6p' "$BUNDLE/MANIFEST" 2>/dev/null
  echo "glibc here: $(ldd --version 2>&1 | head -1); ${CXX_NOTE:-}; LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  command -v nvidia-smi >/dev/null && timeout 10 nvidia-smi --query-gpu=name,pci.bus_id,driver_version,memory.total --format=csv,noheader
  [ -r /proc/driver/nvidia/version ] && head -1 /proc/driver/nvidia/version
  ls -l /dev/nvidia* 2>&1 | head -8
  echo "$DEV_IB: $(ls "$DEV_IB" 2>&1 | tr '\n' ' ')"
  echo "RDMA ports ($SYS_IB): $(port_states)"
  echo "rdma-core: $RDMA_CORE_NOTE${RDMAV_DRIVERS:+; RDMAV_DRIVERS=$RDMAV_DRIVERS}"
  echo "ulimit -l: $(ulimit -l)"
  echo "nvidia_peermem: $([ -e /sys/module/nvidia_peermem ] && echo loaded || echo 'not loaded')"
  echo "kernel RDMA: $(kernel_rdma_summary)"
  echo "modprobe: ${KRDMA_MODPROBE:-none}; rdma (iproute2): ${RDMA_TOOL:-none}"
} > "$LOG/facts.txt" 2>&1
# The ports to test on: SLUICE_TEST_DEVICES as scripts/test reads it (tests/rdma/test_devices.sh),
# handed to the plugin and to NCCL as NCCL_IB_HCA.
DEVICES_BAD="" DEVICES_NOTE=""
if [ -n "${SLUICE_TEST_DEVICES:-}" ]; then
  if pair=$(sluice_test_ports 2>&1); then
    # shellcheck disable=SC2086  # "dev:port dev:port" (the same twice for loopback)
    set -- $pair
    hca="=$1"; [ "$2" != "$1" ] && hca+=",$2"
    if [ -n "${NCCL_IB_HCA:-}" ]; then
      DEVICES_NOTE="NCCL_IB_HCA=$NCCL_IB_HCA kept (SLUICE_TEST_DEVICES=$SLUICE_TEST_DEVICES not applied)"
    else
      export NCCL_IB_HCA=$hca
      DEVICES_NOTE="SLUICE_TEST_DEVICES=$SLUICE_TEST_DEVICES: NCCL_IB_HCA=$hca"
    fi
  else
    DEVICES_BAD=$pair
  fi
  set --
fi
if [ -z "$DEVICES_NOTE$DEVICES_BAD" ]; then
  DEVICES_NOTE="${NCCL_IB_HCA:+NCCL_IB_HCA=$NCCL_IB_HCA: }every ACTIVE port the plugin offers; step 4 on the one nearest the GPU"
fi
echo "ports chosen: ${DEVICES_BAD:-$DEVICES_NOTE}" >> "$LOG/facts.txt"
timeout 30 "$PY" - > "$LOG/torch.txt" 2>&1 <<'EOF'
import glob, os, sys
print("python", sys.version.split()[0], sys.executable)
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())),
          "gpus", torch.cuda.device_count())
except Exception as e:
    print("torch: import failed:", repr(e))
for p in sys.path:
    for f in glob.glob(os.path.join(p, "nvidia", "*", "lib", "libnccl.so.2")) + glob.glob(os.path.join(p, "nvidia", "*", "lib", "libcudart.so.*")):
        print("wheel-lib", f)
EOF
cat "$LOG/torch.txt" >> "$LOG/facts.txt"
WHEEL_NCCL=$(grep -m1 -oE 'wheel-lib .*/libnccl\.so\.2$' "$LOG/torch.txt" | cut -d' ' -f2)
[ -n "$WHEEL_NCCL" ] && echo "wheel libnccl.so.2: $WHEEL_NCCL" >> "$LOG/facts.txt"
cat "$LOG/facts.txt"
GPU_NODES=no; { [ -e /dev/nvidiactl ] || [ -e /dev/nvidia0 ]; } && GPU_NODES=yes
if [ "$GPU_NODES" = no ] && [ -z "${SLUICE_CUDA_LIBRARY:-}" ]; then
  record facts SKIP "no GPU here: /dev/nvidiactl and /dev/nvidia0 do not exist (no NVIDIA driver or device)"
  finish
fi
record facts PASS "kernel $(uname -r); GPU nodes: $GPU_NODES${SLUICE_CUDA_LIBRARY:+ (CUDA library: $SLUICE_CUDA_LIBRARY)}; $(grep -m1 '^torch' "$LOG/torch.txt" || echo 'torch: none'); ${WHEEL_NCCL:+wheel NCCL $WHEEL_NCCL; }ulimit -l $(ulimit -l); RDMA ports: $(port_states); kernel RDMA: $(kernel_rdma_summary)"
for f in "$CHECK" "$INFO" "$PLUGIN"; do
  if [ ! -e "$f" ]; then
    record cuda FAIL "missing $f (build it, or scripts/gpu-bundle)"
    finish
  fi
done

# ---- 2. CUDA ----------------------------------------------------------------------------------
timeout 45 "$CHECK" cuda > "$LOG/cuda.txt" 2>&1; rc=$?
cat "$LOG/cuda.txt"
if [ "$rc" = 77 ]; then
  record cuda SKIP "CUDA unusable: $(first 'CHECK cuda_init' "$LOG/cuda.txt")"
  finish
elif [ "$rc" = 0 ]; then
  record cuda PASS "$(grep -c ': PASS' "$LOG/cuda.txt") checks passed, $(grep -c ': SKIP' "$LOG/cuda.txt") skipped; $(first 'CHECK cuda_device' "$LOG/cuda.txt" | cut -c1-120)"
else
  record cuda FAIL "gpu-check cuda exit $rc: $(grep ': FAIL' "$LOG/cuda.txt" | head -2 | tr '\n' ' ')"
fi

# ---- 3. the GPUDirect decision ----------------------------------------------------------------
timeout 20 "$INFO" --json > "$LOG/sluice-info.json" 2> "$LOG/sluice-info.stderr"; rc=$?
GDR=$(python3 - "$LOG/sluice-info.json" <<'EOF' 2>&1
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except Exception as e:
    print("BAD sluice-info --json is not JSON:", e); sys.exit(0)
g = j.get("gpudirect", {})
devs = g.get("devices", [])
gpus = ", ".join(f"{x['name']} {x['pci_bus_id']} rdma={x['gpu_direct_rdma_supported']} dmabuf={x['dma_buf_supported']} c2c={x.get('c2c')}" for x in g.get("gpus", []))
head = f"mode {g.get('mode')}, driver {g.get('driver')} ({g.get('driver_text','')[:80]}), peermem {g.get('peermem')}; GPUs: {gpus or 'none'}"
if not devs:
    print(("OK " if g.get("driver") else "BAD ") + head + "; no RDMA device to decide for")
else:
    print(("OK " if g.get("driver") else "BAD ") + head + "; " + "; ".join(f"{d['name']}: {d['ptr_support']} ({d['summary'][:160]})" for d in devs))
EOF
)
echo "$GDR"
if [ "$rc" != 0 ]; then
  record gdr FAIL "sluice-info --json exit $rc: $(tail -2 "$LOG/sluice-info.stderr" | tr '\n' ' ')"
elif [ "${GDR#OK }" != "$GDR" ]; then
  record gdr PASS "${GDR#OK }"
else
  record gdr FAIL "sluice-info does not see the CUDA driver although gpu-check does: ${GDR#BAD }"
fi

# ---- 4. RDMA: GPU -> GPU through the plugin ---------------------------------------------------
RDMA_WHY="" RXE_NOTE=""
# Soft-RoCE only where no RDMA device exists at all, and only as far as the kernel allows
# (tests/gpu/kernel_rdma.sh): never a modprobe that cannot work, never rxe beside a real NIC.
if ! usable_uverbs && [ -z "$DEVICES_BAD" ]; then
  plan=$(rxe_plan)
  how=${plan%% *} RXE_NOTE=${plan#* }
  if [ "$how" != no ] && [ "${SLUICE_GPU_RUN_NO_RXE:-0}" = 1 ]; then
    RXE_NOTE="rdma_rxe: not tried (SLUICE_GPU_RUN_NO_RXE=1; $RXE_NOTE)"
  elif [ "$how" != no ]; then
    if [ "$how" = modprobe ]; then
      out=$( (timeout 10 "$KRDMA_MODPROBE" rdma_rxe) 2>&1 ); mrc=$?
      echo "modprobe rdma_rxe: exit $mrc $out" >> "$LOG/facts.txt"
      [ "$mrc" = 0 ] || { how=no RXE_NOTE="modprobe rdma_rxe: exit $mrc${out:+ ${out:0:160}} ($RXE_NOTE)"; }
    fi
    if [ "$how" != no ]; then
      NETDEV=$(ip -o route get 1.1.1.1 2>/dev/null | grep -oE 'dev [^ ]+' | cut -d' ' -f2)
      if [ -z "$NETDEV" ]; then
        for n in /sys/class/net/*; do [ "${n##*/}" != lo ] && NETDEV=${n##*/} && break; done
      fi
      if [ -z "$RDMA_TOOL" ] || [ ! -x "$RDMA_TOOL" ]; then
        RXE_NOTE="no rdma tool (iproute2) to create an rxe device ($RXE_NOTE)"
      elif [ -z "$NETDEV" ]; then
        RXE_NOTE="no network device to put an rxe device on ($RXE_NOTE)"
      elif out=$("$RDMA_TOOL" link add sluice_rxe0 type rxe netdev "$NETDEV" 2>&1); then
        RXE_NOTE="rxe: sluice_rxe0 on $NETDEV ($RXE_NOTE)"
        trap '"$RDMA_TOOL" link delete sluice_rxe0 2>/dev/null' EXIT  # ours: gone again at the end
      else
        RXE_NOTE="rdma link add sluice_rxe0 type rxe netdev $NETDEV: ${out:0:160} ($RXE_NOTE)"
      fi
    fi
  fi
  echo "$RXE_NOTE" | tee -a "$LOG/facts.txt"
fi
if [ -n "$DEVICES_BAD" ]; then
  record rdma FAIL "$DEVICES_BAD"
elif usable_uverbs; then
  timeout 75 "$CHECK" plugin "$PLUGIN" > "$LOG/plugin.txt" 2>&1; rc=$?
  cat "$LOG/plugin.txt"
  if [ "$rc" = 0 ]; then
    record rdma PASS "$(first 'CHECK plugin_init: PASS' "$LOG/plugin.txt" | cut -c1-110); $(first 'CHECK gpu_dmabuf_transfer: PASS' "$LOG/plugin.txt" | cut -c1-110); $(first 'CHECK gpu_transfer: PASS' "$LOG/plugin.txt" | cut -c1-110); $(first 'CHECK gpu_eager: PASS' "$LOG/plugin.txt" | cut -c1-110)"
  elif [ "$rc" = 77 ] && grep -q '^CHECK plugin_init: SKIP' "$LOG/plugin.txt"; then
    # uverbs exist, but the plugin offers no port: none ACTIVE, or NCCL_IB_HCA excludes them.
    RDMA_WHY="no usable RDMA port: the plugin offers none (ports: $(port_states)${NCCL_IB_HCA:+; NCCL_IB_HCA=$NCCL_IB_HCA}; its WARN in $LOG/plugin.txt says why)${RXE_NOTE:+; $RXE_NOTE}"
    record rdma SKIP "$RDMA_WHY"
  elif [ "$rc" = 77 ]; then
    record rdma SKIP "$(grep -E ': SKIP' "$LOG/plugin.txt" | sed -E 's/^CHECK ([a-z_]+): SKIP /\1: /' | head -3 | tr '\n' ' ')"
  else
    record rdma FAIL "gpu-check plugin exit $rc: $(grep ': FAIL' "$LOG/plugin.txt" | head -3 | tr '\n' ' ')"
  fi
else
  RDMA_WHY="no RDMA device: $DEV_IB has no usable uverbs ($(ls "$DEV_IB" 2>&1 | tr '\n' ' ' | sed 's/ $//')); $RXE_NOTE"
  # Still run the plugin's part, to show what it says (exit 77: skipped with the reason).
  timeout 30 "$CHECK" plugin "$PLUGIN" > "$LOG/plugin.txt" 2>&1; rc=$?
  cat "$LOG/plugin.txt"
  if [ "$rc" = 1 ]; then
    record rdma FAIL "gpu-check plugin exit 1 without RDMA devices: $(grep ': FAIL' "$LOG/plugin.txt" | head -2 | tr '\n' ' ')"
  else
    record rdma SKIP "$RDMA_WHY"
  fi
fi

# ---- 5. NCCL end to end through PyTorch's NCCL ------------------------------------------------
port=$((29500 + RANDOM % 2000))
pids=()
for r in 0 1; do
  env NCCL_NET_PLUGIN="$PLUGIN" NCCL_NET=Sluice NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 \
      NCCL_HOSTID="sluice-gpu-host$r" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH,ENV \
      NCCL_DEBUG_FILE="$LOG/nccl/nccl.%h.%p.log" RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 \
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      timeout 100 "$PY" "$TORCH_SCRIPT" > "$LOG/nccl/rank$r.stdout" 2>&1 &
  pids+=($!)
done
wait "${pids[0]}"; r0=$?
wait "${pids[1]}"; r1=$?
tail -n 4 "$LOG/nccl/rank0.stdout" "$LOG/nccl/rank1.stdout"
res0=$(grep -m1 '^TORCH_NCCL:' "$LOG/nccl/rank0.stdout" || echo "TORCH_NCCL: none (exit $r0)")
res1=$(grep -m1 '^TORCH_NCCL:' "$LOG/nccl/rank1.stdout" || echo "TORCH_NCCL: none (exit $r1)")
logs=("$LOG"/nccl/nccl.*.log)
proof=$(nccl_log_verdict "${logs[@]}"); prc=$?
echo "NCCL's log: $proof"
grep -h -E 'GPU Direct RDMA|via NET/|Failed to initialize|NCCL WARN' "${logs[@]}" 2>/dev/null | head -12
if [ "$r0" = 0 ] && [ "$r1" = 0 ] && [ "$prc" = 0 ]; then
  record nccl PASS "${res0#TORCH_NCCL: PASS } on rank 0, ${res1#TORCH_NCCL: } on rank 1; $proof"
elif [ "$prc" = 2 ] && [ -n "$RDMA_WHY" ]; then
  record nccl SKIP "expected without an RDMA device: NCCL refused with \"Failed to initialize any NET plugin\" (rank exits $r0/$r1)"
elif [ "$prc" = 2 ]; then
  record nccl FAIL "NCCL refused with \"Failed to initialize any NET plugin\" although an RDMA device exists (see the plugin's WARN in $LOG/nccl)"
elif grep -q "import torch failed" "$LOG/nccl/rank0.stdout"; then
  record nccl SKIP "PyTorch not importable by $PY: $(grep -m1 'import torch failed' "$LOG/nccl/rank0.stdout" | cut -c1-120)"
else
  record nccl FAIL "rank exits $r0/$r1; ${res0:0:160}; NCCL's log: $proof"
fi
finish
