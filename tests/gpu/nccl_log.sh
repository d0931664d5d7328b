# shellcheck shell=bash
# tests/gpu/nccl_log.sh: reads NCCL's own proof lines from the files NCCL really writes
# (NCCL_DEBUG_FILE, one per process: run.sh sets NCCL_DEBUG_FILE=DIR/nccl.%h.%p.log). Sourced by
# tests/gpu/run.sh and by tests/gpu/nccl_log_test.sh. The lines, as NCCL 2.28 prints them:
#   NET/Plugin: Loaded net plugin Sluice (v12)          src/plugin/net/net_v12.cc
#   Initialized NET plugin Sluice / Assigned NET plugin Sluice to comm      src/plugin/net.cc
#   Using network Sluice                                 src/init.cc
#   Channel 00/0 : 0[0] -> 1[0] [send] via NET/Sluice/0/GDRDMA      src/transport/net.cc sendSetup
#   Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Sluice/0          ... recvSetup
#     (suffixes: "/GDRDMA" when useGdr, then "(PCI)" for the PCIe dma-buf mapping, "/Shared";
#      a PXN proxy shows "NET/Sluice/0(1)")
#   GPU Direct RDMA Enabled for GPU 0 / HCA 0 (distance 3 <= 4), read 1 mode Default
#   GPU Direct RDMA Disabled for GPU 0 / HCA 0 (distance 7 > 4)     src/graph/paths.cc
#   ... NCCL WARN Failed to initialize any NET plugin                 src/plugin/net.cc
# (NCCL writes "GPU Direct RDMA", never "GPUDirect RDMA".)

# nccl_log_scan FILE...: sets NCCL_LOADED NCCL_USING NCCL_VIA NCCL_VIA_GDR NCCL_VIA_OTHER
# NCCL_REFUSED NCCL_GDR_ENABLED NCCL_GDR_DISABLED (counts; 0 when absent) and NCCL_FILES (how many
# of the files exist).
nccl_log_scan() {
  NCCL_FILES=0 NCCL_LOADED=0 NCCL_USING=0 NCCL_VIA=0 NCCL_VIA_GDR=0 NCCL_VIA_OTHER=0
  NCCL_REFUSED=0 NCCL_GDR_ENABLED=0 NCCL_GDR_DISABLED=0
  local f files=()
  for f in "$@"; do [ -f "$f" ] && files+=("$f"); done
  NCCL_FILES=${#files[@]}
  [ "$NCCL_FILES" -gt 0 ] || return 0
  c() { cat "${files[@]}" | grep -Ec -- "$1"; }
  NCCL_LOADED=$(c 'NET/Plugin: Loaded net plugin Sluice|Initialized NET plugin Sluice|Successfully loaded external network plugin .*sluice')
  NCCL_USING=$(c 'Using network Sluice|Assigned NET plugin Sluice to comm')
  NCCL_VIA=$(c 'Channel [0-9]+/[0-9]+ : .* via NET/Sluice/[0-9]+')
  NCCL_VIA_GDR=$(c 'Channel [0-9]+/[0-9]+ : .* via NET/Sluice/[0-9]+(\([0-9]+\))?/GDRDMA')
  NCCL_VIA_OTHER=$(cat "${files[@]}" | grep -E 'Channel [0-9]+/[0-9]+ : .* via ' | grep -Evc ' via NET/Sluice/')
  NCCL_REFUSED=$(c 'NCCL WARN.*Failed to initialize any NET plugin')
  NCCL_GDR_ENABLED=$(c 'GPU Direct RDMA Enabled for GPU')
  NCCL_GDR_DISABLED=$(c 'GPU Direct RDMA Disabled for GPU')
  unset -f c
}

# nccl_log_verdict FILE...: prints one line and returns 0 (Sluice carried every channel), 2 (NCCL
# refused: "Failed to initialize any NET plugin"), 1 (anything else: no proof, another transport).
nccl_log_verdict() {
  nccl_log_scan "$@"
  if [ "$NCCL_FILES" = 0 ]; then
    echo "no NCCL log file (NCCL_DEBUG_FILE) was written"
    return 1
  fi
  if [ "$NCCL_REFUSED" -gt 0 ] && [ "$NCCL_VIA" = 0 ]; then
    echo "NCCL refused: \"Failed to initialize any NET plugin\" (NCCL_NET=Sluice and the plugin found no usable device)"
    return 2
  fi
  if [ "$NCCL_VIA_OTHER" -gt 0 ]; then
    echo "$NCCL_VIA_OTHER channel line(s) not via NET/Sluice: another transport carried traffic"
    return 1
  fi
  if [ "$NCCL_LOADED" = 0 ] || [ "$NCCL_USING" = 0 ] || [ "$NCCL_VIA" = 0 ]; then
    echo "NCCL's log lacks the proof (plugin loaded: $NCCL_LOADED, using Sluice: $NCCL_USING, channels via NET/Sluice: $NCCL_VIA)"
    return 1
  fi
  local how
  if [ "$NCCL_VIA_GDR" = "$NCCL_VIA" ]; then
    how="GPUDirect RDMA (every channel /GDRDMA)"
  elif [ "$NCCL_VIA_GDR" = 0 ]; then
    how="staged through host memory (no channel /GDRDMA)"
  else
    how="mixed ($NCCL_VIA_GDR of $NCCL_VIA channels /GDRDMA)"
  fi
  echo "$NCCL_VIA channel(s) via NET/Sluice, $how; GPU Direct RDMA lines: $NCCL_GDR_ENABLED Enabled, $NCCL_GDR_DISABLED Disabled"
  return 0
}
