# shellcheck shell=sh
# shellcheck disable=SC2086,SC2012   # word splitting of port lists intended; sysfs names are plain
# Sourced by the shell-based rdma tests: the pair of RDMA ports to test on, resolved as the C++
# tests resolve it (tests/rdma/rdma_env.h), from sysfs:
#   SLUICE_TEST_DEVICES=dev[:port][,dev[:port]]  (port defaults to 1; one entry = loopback), else
#   the first two ACTIVE ports under /sys/class/infiniband (device names sorted, ports ascending),
#   else one ACTIVE port twice (loopback).
# No test names a device. POSIX sh (the tests run under /bin/sh).
#
#   sluice_test_ports        prints "dev:port dev:port"; non-zero with a reason on stderr if none
#                            is active or SLUICE_TEST_DEVICES names a port that is not ACTIVE
#   sluice_link_layer D P    "InfiniBand" or "Ethernet" (RoCE)
#   sluice_gid_index D P     RoCE: a usable GID index (RoCE v2 IPv4-mapped first, then RoCE v2,
#                            then any non-zero GID); InfiniBand: prints nothing (LID addressing)

SLUICE_SYS_IB=${SLUICE_SYS_IB:-/sys/class/infiniband}

sluice_port_active() {  # dev port
  grep -q ACTIVE "$SLUICE_SYS_IB/$1/ports/$2/state" 2>/dev/null
}

sluice_active_ports() {  # every ACTIVE port, "dev:port" per line
  for _d in "$SLUICE_SYS_IB"/*; do
    [ -d "$_d/ports" ] || continue
    for _p in $(ls "$_d/ports" | sort -n); do
      sluice_port_active "${_d##*/}" "$_p" && echo "${_d##*/}:$_p"
    done
  done
}

sluice_test_ports() {
  if [ -n "${SLUICE_TEST_DEVICES:-}" ]; then
    _out=""
    _n=0
    for _item in $(echo "$SLUICE_TEST_DEVICES" | tr ',' ' '); do
      case "$_item" in *:*) ;; *) _item="$_item:1" ;; esac
      if ! sluice_port_active "${_item%:*}" "${_item##*:}"; then
        echo "SLUICE_TEST_DEVICES=$SLUICE_TEST_DEVICES: $_item is not an ACTIVE RDMA port here" \
          "(active: $(sluice_active_ports | tr '\n' ' '))" >&2
        return 1
      fi
      _out="$_out${_out:+ }$_item"
      _n=$((_n + 1))
    done
    case $_n in
      1) echo "$_out $_out" ;;
      2) echo "$_out" ;;
      *) echo "SLUICE_TEST_DEVICES=$SLUICE_TEST_DEVICES: one or two dev[:port] entries" >&2; return 1 ;;
    esac
    return 0
  fi
  _all=$(sluice_active_ports | head -n 2 | tr '\n' ' ')
  set -- $_all
  case $# in
    0) echo "no ACTIVE RDMA port under $SLUICE_SYS_IB (run through scripts/rdma-bed)" >&2; return 1 ;;
    1) echo "$1 $1" ;;
    *) echo "$1 $2" ;;
  esac
}

sluice_link_layer() {  # dev port
  cat "$SLUICE_SYS_IB/$1/ports/$2/link_layer" 2>/dev/null
}

sluice_gid_index() {  # dev port
  [ "$(sluice_link_layer "$1" "$2")" = Ethernet ] || return 0
  _dir=$SLUICE_SYS_IB/$1/ports/$2
  _v2="" _any=""
  # Builtin reads only: a GID table has up to 1024 entries (Soft-RoCE), a fork each is slow in TCG.
  for _g in $(ls "$_dir/gids" | sort -n); do
    read -r _gid < "$_dir/gids/$_g" 2>/dev/null || continue
    [ "$_gid" = "0000:0000:0000:0000:0000:0000:0000:0000" ] && continue
    read -r _type < "$_dir/gid_attrs/types/$_g" 2>/dev/null || _type=""
    case "$_type" in
      "RoCE v2"*)
        case "$_gid" in 0000:0000:0000:0000:0000:ffff:*) echo "$_g"; return 0 ;; esac
        [ -n "$_v2" ] || _v2=$_g ;;
    esac
    [ -n "$_any" ] || _any=$_g
  done
  if [ -n "$_v2" ]; then echo "$_v2"; else echo "${_any:-0}"; fi
}
