#!/bin/bash
# Two-host bed, both links (scripts/rdma-bed --two-host): run as `bed_two_links.sh` on each VM.
#  1. Both Soft-RoCE devices are ACTIVE on each host (SLUICE_BED_DEVICES names both).
#  2. rping (rdma_cm: SEND, RDMA READ/WRITE) host1 -> host0 over the first link (SLUICE_BED_ADDR,
#     eth0) and then over the second (SLUICE_BED_ADDR2, eth1): each run must raise the packet
#     counters of its own device on host1 and leave the other device's unchanged, i.e. each link
#     carries RDMA between the hosts, and on the device it should.
#  3. host1 takes eth1 down (`ip link set eth1 down`): ibv_asyncwatch on the second device reports
#     IBV_EVENT_PORT_ERR and its port reads DOWN, while the first device reports no event and stays
#     ACTIVE; eth1 up again: PORT_ACTIVE on the second device, its GID of SLUICE_BED_ADDR2 back.
set -u
read -r -a devs <<< "${SLUICE_BED_DEVICES:-}"
host=${SLUICE_BED_HOST:?not in the two-host bed}
say() { echo "bed_two_links host$host: $*"; }
fail() { say "FAIL: $*"; exit 1; }
[ "${#devs[@]}" -eq 2 ] || fail "SLUICE_BED_DEVICES='${SLUICE_BED_DEVICES:-}': want two devices (SLUICE_BED_LINKS=2)"
d0=${devs[0]} d1=${devs[1]}
sys=/sys/class/infiniband
state() { cat "$sys/$1/ports/1/state" 2>/dev/null; }
counter() { cat "$sys/$1/ports/1/hw_counters/$2" 2>/dev/null || echo 0; }
for d in "$d0" "$d1"; do
  case "$(state "$d")" in *ACTIVE*) ;; *) fail "$d is not ACTIVE: $(state "$d")" ;; esac
  say "$d on $(cat "$sys/$d/ports/1/gid_attrs/ndevs/0"), GID 1 $(cat "$sys/$d/ports/1/gids/1")"
done
peer0=169.254.0.1 peer1=${SLUICE_BED_ADDR2%.*}.1

if [ "$host" = 0 ]; then
  rping -s -a "$peer0" -C 3 || fail "rping server on $peer0 ($d0)"
  rping -s -a "$peer1" -C 3 || fail "rping server on $peer1 ($d1)"
  say "served both links"
  exit 0
fi

client() {  # address: retried until the server listens
  local n=0
  until rping -c -a "$1" -C 3 > /dev/null; do
    n=$((n + 1))
    [ $n -lt 100 ] || return 1
    sleep 0.2
  done
}
snap() { sleep 0.1; echo "$(counter "$d0" sent_pkts) $(counter "$d1" sent_pkts)"; }
read -r a0 a1 <<< "$(snap)"
client "$peer0" || fail "rping over $d0 to $peer0"
read -r b0 b1 <<< "$(snap)"
client "$peer1" || fail "rping over $d1 to $peer1"
read -r c0 c1 <<< "$(snap)"
say "sent_pkts $d0/$d1: before $a0/$a1, after link 1 $b0/$b1, after link 2 $c0/$c1"
# Link 1's run: d0 sent, d1 did not (the first rping's retries before host0 listens count on d0).
[ "$b0" -gt "$a0" ] || fail "rping to $peer0 sent nothing on $d0"
[ "$b1" -eq "$a1" ] || fail "rping to $peer0 sent $((b1 - a1)) packets on $d1"
[ "$c1" -gt "$b1" ] || fail "rping to $peer1 sent nothing on $d1"
[ "$c0" -eq "$b0" ] || fail "rping to $peer1 sent $((c0 - b0)) packets on $d0"

# The second link down: a port event on its device only.
w=$(mktemp -d "${TMPDIR:-/tmp}/two_links.XXXXXX")
ibv_asyncwatch -d "$d0" > "$w/$d0" 2>&1 &
p0=$!
ibv_asyncwatch -d "$d1" > "$w/$d1" 2>&1 &
p1=$!
sleep 1   # both watchers have opened their device
ip link set eth1 down || fail "ip link set eth1 down"
n=0
until grep -q PORT_ERR "$w/$d1"; do
  n=$((n + 1))
  [ $n -lt 100 ] || { kill $p0 $p1; cat "$w/$d1"; fail "no PORT_ERR on $d1 within 10 s of eth1 down"; }
  sleep 0.1
done
sleep 1   # time for a stray event on the other device to show
s0=$(state "$d0") s1=$(state "$d1")
ip link set eth1 up || fail "ip link set eth1 up"
n=0
# shellcheck disable=SC2086   # the address's four numbers
gid2=$(printf '%02x%02x:%02x%02x' ${SLUICE_BED_ADDR2//./ })   # its IPv4-mapped GID's tail
until grep -q PORT_ACTIVE "$w/$d1" && cat "$sys/$d1"/ports/1/gids/* 2>/dev/null | grep -q "ffff:$gid2"; do
  n=$((n + 1))
  [ $n -lt 100 ] || { kill $p0 $p1; cat "$w/$d1"; fail "$d1 not back (PORT_ACTIVE and its GID) within 10 s of eth1 up"; }
  sleep 0.1
done
kill $p0 $p1
wait $p0 $p1 2> /dev/null
say "eth1 down: $d1 events: $(grep -o 'IBV_EVENT_[A-Z_]*' "$w/$d1" | tr '\n' ' ')state $s1; $d0 events: $(grep -c event_type "$w/$d0"), state $s0"
case "$s1" in *DOWN*) ;; *) fail "$d1 port reads '$s1' with eth1 down" ;; esac
case "$s0" in *ACTIVE*) ;; *) fail "$d0 port reads '$s0' with eth1 down" ;; esac
if grep -q event_type "$w/$d0"; then cat "$w/$d0"; fail "$d0 got an event when eth1 went down"; fi
say "PASS"
