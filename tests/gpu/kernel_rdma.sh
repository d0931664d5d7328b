# shellcheck shell=bash
# tests/gpu/kernel_rdma.sh: what the running kernel can do for RDMA, read from its own
# configuration, and whether a Soft-RoCE device (rdma_rxe) can be had on it. Sourced by
# tests/gpu/run.sh (step 1 reports it, step 4 acts on it) and tests/gpu/kernel_rdma_test.sh.
#
#   kernel_rdma_read   sets
#     KRDMA_SRC            where the configuration was read (/proc/config.gz, /boot/config-<release>,
#                          or SLUICE_GPU_RUN_KCONFIG); "" when none was readable
#     KRDMA_<NAME>         y, m, unset, or ? (no configuration) for INFINIBAND,
#                          INFINIBAND_USER_ACCESS, RDMA_RXE, RDMA_SIW, MLX5_INFINIBAND, MODULES
#     KRDMA_MODPROBE       modprobe's path, "" when there is none
#     KRDMA_MODULES_WHY    why modules cannot be loaded, "; "-joined ("" when they can: modprobe,
#                          /lib/modules/<release> and CONFIG_MODULES not unset)
#     KRDMA_RXE_LOADED     yes when /sys/module/rdma_rxe exists (loaded, or built in with a version)
#   kernel_rdma_summary  one line: the six settings, where they were read, and the modules' verdict
#   rxe_plan           one line: "link <why>" (rxe is in the kernel: `rdma link add` directly),
#                      "modprobe <why>" (load it first, as before), or "no <reason>" (it cannot be
#                      had; <reason> starts "rdma_rxe is not in this kernel and it cannot load
#                      modules" when CONFIG_RDMA_RXE is not y and modules cannot be loaded)
#
# What the machine is (rehearsals and tests only; unset on a real run):
#   SLUICE_GPU_RUN_KCONFIG=FILE       the kernel configuration (gzip'ed when it ends in .gz)
#   SLUICE_GPU_RUN_MODPROBE=PATH|""   modprobe ("" = none; insmod is then not looked for either)
#   SLUICE_GPU_RUN_MODULES_DIR=DIR    instead of /lib/modules/$(uname -r)
#   SLUICE_GPU_RUN_SYS_MODULE=DIR     instead of /sys/module
KRDMA_NAMES="INFINIBAND INFINIBAND_USER_ACCESS RDMA_RXE RDMA_SIW MLX5_INFINIBAND MODULES"

kernel_config_source() {  # sets KRDMA_SRC: the configuration's file, "" when none is readable
  local release f
  release=$(uname -r)
  KRDMA_SRC=""
  if [ -n "${SLUICE_GPU_RUN_KCONFIG:-}" ]; then
    f=$SLUICE_GPU_RUN_KCONFIG
  elif [ -r /proc/config.gz ]; then
    f=/proc/config.gz
  else
    f=/boot/config-$release
  fi
  [ -r "$f" ] && KRDMA_SRC=$f
  return 0
}

kernel_config_text() {  # FILE: its text on stdout, gunzipped when it ends in .gz
  case "$1" in
    *.gz)
      if command -v zcat > /dev/null; then zcat "$1"
      elif command -v gzip > /dev/null; then gzip -dc "$1"
      else python3 -c 'import gzip, sys; sys.stdout.write(gzip.open(sys.argv[1], "rt").read())' "$1"
      fi ;;
    *) cat "$1" ;;
  esac
}

kernel_rdma_read() {
  local text n v release moddir insmod="" why=()
  release=$(uname -r)
  kernel_config_source
  text=""
  [ -n "$KRDMA_SRC" ] && text=$(kernel_config_text "$KRDMA_SRC" 2> /dev/null)
  [ -n "$text" ] || KRDMA_SRC=""
  for n in $KRDMA_NAMES; do
    if [ -z "$KRDMA_SRC" ]; then
      v="?"
    else
      v=$(sed -nE "s/^CONFIG_${n}=(.*)$/\\1/p" <<< "$text" | tail -1)
      [ -n "$v" ] || v="unset"  # "# CONFIG_X is not set", or absent
    fi
    printf -v "KRDMA_$n" '%s' "$v"
  done
  if [ -n "${SLUICE_GPU_RUN_MODPROBE+set}" ]; then
    KRDMA_MODPROBE=$SLUICE_GPU_RUN_MODPROBE
  else
    # Not only $PATH: a user's PATH often lacks /sbin.
    KRDMA_MODPROBE=$(command -v modprobe 2> /dev/null || true)
    for v in /sbin/modprobe /usr/sbin/modprobe; do [ -z "$KRDMA_MODPROBE" ] && [ -x "$v" ] && KRDMA_MODPROBE=$v; done
    insmod=$(command -v insmod 2> /dev/null || true)
    for v in /sbin/insmod /usr/sbin/insmod; do [ -z "$insmod" ] && [ -x "$v" ] && insmod=$v; done
  fi
  moddir=${SLUICE_GPU_RUN_MODULES_DIR:-/lib/modules/$release}
  [ "$KRDMA_MODULES" = unset ] && why+=("CONFIG_MODULES unset")
  [ -d "$moddir" ] || why+=("no $moddir")
  if [ -z "$KRDMA_MODPROBE" ]; then
    if [ -n "$insmod" ]; then why+=("no modprobe (only insmod)"); else why+=("no modprobe or insmod"); fi
  fi
  KRDMA_MODULES_WHY=""
  for v in "${why[@]}"; do KRDMA_MODULES_WHY+="${KRDMA_MODULES_WHY:+; }$v"; done
  KRDMA_RXE_LOADED=no
  [ -d "${SLUICE_GPU_RUN_SYS_MODULE:-/sys/module}/rdma_rxe" ] && KRDMA_RXE_LOADED=yes
  return 0
}

kernel_rdma_summary() {
  local n v out=""
  for n in $KRDMA_NAMES; do
    v=KRDMA_$n
    out+="${out:+ }CONFIG_$n=${!v}"
  done
  local src=$KRDMA_SRC
  if [ -z "$src" ] && [ -n "${SLUICE_GPU_RUN_KCONFIG:-}" ]; then
    src="no kernel configuration readable: SLUICE_GPU_RUN_KCONFIG=$SLUICE_GPU_RUN_KCONFIG"
  elif [ -z "$src" ]; then
    src="no kernel configuration readable: no /proc/config.gz or /boot/config-$(uname -r)"
  fi
  echo "$out ($src); modules: ${KRDMA_MODULES_WHY:-can be loaded}"
}

rxe_plan() {
  local facts="CONFIG_RDMA_RXE=$KRDMA_RDMA_RXE, CONFIG_RDMA_SIW=$KRDMA_RDMA_SIW"
  case "$KRDMA_INFINIBAND" in y|m|"?") ;; *) facts="CONFIG_INFINIBAND=$KRDMA_INFINIBAND (no RDMA at all), $facts" ;; esac
  case "$KRDMA_RDMA_SIW" in y|m) facts+=" (siw is iWARP, which Sluice does not offer to NCCL)" ;; esac
  if [ "$KRDMA_RDMA_RXE" = y ]; then
    echo "link rdma_rxe is built in (CONFIG_RDMA_RXE=y): no module to load"
  elif [ "$KRDMA_RXE_LOADED" = yes ]; then
    echo "link rdma_rxe is loaded already (/sys/module/rdma_rxe)"
  elif [ -z "$KRDMA_MODULES_WHY" ]; then
    echo "modprobe modules can be loaded; $facts"
  elif [ "$KRDMA_RDMA_RXE" = "?" ]; then
    # No configuration to tell: rxe may be built in, so ask for the device directly.
    echo "link the kernel's configuration is unreadable, so rdma_rxe may be built in; modules cannot be loaded ($KRDMA_MODULES_WHY)"
  else
    echo "no rdma_rxe is not in this kernel and it cannot load modules ($facts; $KRDMA_MODULES_WHY)"
  fi
}
