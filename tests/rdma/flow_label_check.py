#!/usr/bin/env python3
"""Checks RoCE v2 UDP source ports in a capture against the flow labels Sluice logged.

Usage: flow_label_check.py MODE PCAP LOG [MIN_QPS]
  MODE    labels: SLUICE_FLOW_LABEL on (auto or a seed); off: the kernel's QPN hash
  PCAP    tcpdump -w capture (Ethernet) of the link the RoCE traffic crosses
  LOG     the plugin's INFO lines ("flow labels for rxe0:1 -> rxe1 at ...: qpn A->B label 0x.. sport N, ...")
  MIN_QPS at least one connection must show this many QPs carrying packets (default 4)

Every RoCE v2 packet (UDP dport 4791) is attributed to the sending device by its source address
(the device's GIDs in sysfs) and to the sending QP by the destination QPN in its BTH, whose
connection line names the port Sluice predicted (packets to QP1, rdma_cm's MADs, are counted only). A packet from another host (two-host bed: its
source is no local GID) is checked against the label of the local QP it is addressed to: both ends
label the two QPs of a pair alike (labels mode; off: the QPN hash is symmetric too). Checked: each packet's UDP source port equals
the prediction; the prediction equals the kernel's rule applied here independently
(rdma_flow_label_to_udp_sport of the label; rdma_calc_flow_label of the QPNs when off); the
labels of a connection are distinct, non-zero, and their ports distinct and evenly spaced. Prints
one row per QP seen: device, QPNs, label, predicted port, ports seen, packets.
"""
import glob
import ipaddress
import os
import re
import struct
import sys


def fold(label):  # include/rdma/ib_verbs.h rdma_flow_label_to_udp_sport
    low = label & 0x3FFF
    high = (label & 0xFC000) >> 14
    return (low ^ high) | 0xC000


def qpn_label(a, b):  # rdma_calc_flow_label
    v = (a * b) & 0xFFFFFFFFFFFFFFFF
    v ^= v >> 20
    v ^= v >> 40
    return v & 0xFFFFF


def device_addresses():
    out = {}
    for path in glob.glob("/sys/class/infiniband/*/ports/*/gids/*"):
        dev = path.split("/")[4]
        try:
            g = open(path).read().strip()
        except OSError:
            continue
        if g.replace(":", "").strip("0") == "":
            continue
        a = ipaddress.IPv6Address(g)
        out[a] = dev
        if a.ipv4_mapped is not None:
            out[a.ipv4_mapped] = dev
    return out


def packets(path):
    data = open(path, "rb").read()
    if len(data) < 24:
        return
    magic = struct.unpack("<I", data[:4])[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    linktype = struct.unpack(endian + "I", data[20:24])[0]
    off = 24
    while off + 16 <= len(data):
        _, _, incl, _ = struct.unpack(endian + "IIII", data[off:off + 16])
        pkt = data[off + 16:off + 16 + incl]
        off += 16 + incl
        if linktype == 1:  # Ethernet
            if len(pkt) < 14:
                continue
            etype = struct.unpack(">H", pkt[12:14])[0]
            ip = pkt[14:]
        elif linktype == 113:  # Linux cooked (tcpdump -i any)
            etype = struct.unpack(">H", pkt[14:16])[0]
            ip = pkt[16:]
        else:
            raise SystemExit("unknown pcap link type %d" % linktype)
        if etype == 0x86DD and len(ip) >= 40 and ip[6] == 17:
            src = ipaddress.IPv6Address(ip[8:24])
            dst = ipaddress.IPv6Address(ip[24:40])
            v6_label = struct.unpack(">I", ip[0:4])[0] & 0xFFFFF
            udp = ip[40:]
        elif etype == 0x0800 and len(ip) >= 20 and ip[9] == 17:
            ihl = (ip[0] & 0xF) * 4
            src = ipaddress.IPv4Address(ip[12:16])
            dst = ipaddress.IPv4Address(ip[16:20])
            v6_label = None
            udp = ip[ihl:]
        else:
            continue
        if len(udp) < 8 + 12:
            continue
        sport, dport = struct.unpack(">HH", udp[0:4])
        if dport != 4791:
            continue
        bth = udp[8:20]
        dqpn = int.from_bytes(bth[5:8], "big")
        yield src, dst, sport, dqpn, v6_label


LINE = re.compile(r"flow labels for (\S+?):\d+ -> (\S+) at \S+ \(SLUICE_FLOW_LABEL=([^),]+)[^)]*\): (.*)")
PAIR = re.compile(r"qpn (\d+)->(\d+)(?: label 0x([0-9a-f]+))? sport (\d+)")


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    mode, pcap, log = sys.argv[1:4]
    min_qps = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    errors = []
    # (sending device, receiving device, destination QPN) -> (conn index, local QPN, label, sport)
    expect = {}
    local = {}  # (local device, local QPN) -> (conn index, remote QPN, label, sport)
    conns = []
    for line in open(log, errors="replace"):
        m = LINE.search(line)
        if not m:
            continue
        dev, policy, rest = m.group(1), m.group(3), m.group(4)
        if (mode == "off") != (policy == "off"):
            errors.append("connection logged SLUICE_FLOW_LABEL=%s in mode %s" % (policy, mode))
        qps = [(int(a), int(b), int(l, 16) if l else 0, int(s)) for a, b, l, s in PAIR.findall(rest)]
        ci = len(conns)
        conns.append((dev, m.group(2), qps))
        for lq, rq, label, sport in qps:
            key = (dev, m.group(2), rq)
            if key in expect:
                errors.append("%s -> QPN %d of %s named by two connections: ambiguous" %
                              (dev, rq, m.group(2)))
            expect[key] = (ci, lq, label, sport)
            local[(dev, lq)] = (ci, rq, label, sport)
            want = fold(label) if mode == "labels" else fold(qpn_label(lq, rq))
            if sport != want:
                errors.append("%s qpn %d->%d: logged sport %d, the kernel's rule gives %d" %
                              (dev, lq, rq, sport, want))
            if mode == "labels" and not 0 < label <= 0xFFFFF:
                errors.append("%s qpn %d->%d: label 0x%x out of range" % (dev, lq, rq, label))
        if mode == "labels" and len(qps) > 1:
            labels = [q[2] for q in qps]
            ports = sorted(q[3] - 0xC000 for q in qps)
            if len(set(labels)) != len(labels) or len(set(ports)) != len(ports):
                errors.append("connection %d (%s): labels or ports not distinct: %s" % (ci, dev, qps))
            n = len(ports)
            gaps = [(ports[(i + 1) % n] - ports[i]) % 0x4000 for i in range(n)]
            if any(g not in (0x4000 // n, (0x4000 + n - 1) // n) for g in gaps):
                errors.append("connection %d (%s): ports not evenly spaced, gaps %s" % (ci, dev, gaps))
    if not conns:
        errors.append("no 'flow labels for' line in " + log)

    addr = device_addresses()
    seen = {}  # key -> {sport: packets}
    v6_labels = set()
    total = 0
    mads = 0
    for src, dst, sport, dqpn, v6 in packets(pcap):
        if dqpn == 1:  # QP1 (GSI): rdma_cm's connection MADs, not a QP of Sluice's
            mads += 1
            continue
        total += 1
        dev, peer = addr.get(src), addr.get(dst)
        if dev is None and peer is not None and (peer, dqpn) in local:
            # from the other host, to our QP dqpn: its QP pair's label is ours
            ci, rq, label, sport_l = local[(peer, dqpn)]
            key = ("peer", peer, dqpn)
            expect.setdefault(key, (ci, rq, label, sport_l))
        elif dev is not None and peer is None:
            # ours, to the other host (its address is no local GID): by our device and the QPN
            cands = [k for k in expect if k[0] == dev and k[2] == dqpn]
            if len(cands) != 1:
                errors.append("packet %s -> %s qpn %d: %d connection lines match" %
                              (src, dst, dqpn, len(cands)))
                continue
            key = cands[0]
        elif dev is None or peer is None:
            errors.append("packet %s -> %s: no local device has that address" % (src, dst))
            continue
        else:
            key = (dev, peer, dqpn)
        seen.setdefault(key, {}).setdefault(sport, 0)
        seen[key][sport] += 1
        if v6 is not None:
            v6_labels.add(v6)
    if total == 0:
        errors.append("no RoCE v2 packet in " + pcap)

    per_conn = {}
    print("%-12s %-12s %-8s %-6s %-20s %s" % ("dev", "qpn", "label", "sport", "seen", "packets"))
    for key in sorted(seen):
        ports = seen[key]
        if key not in expect:
            errors.append("%s -> qpn %d of %s: %d packets from a QP no connection line names" %
                          (key[0], key[2], key[1], sum(ports.values())))
            continue
        ci, lq, label, sport = expect[key]
        if key[0] != "peer":  # the other host's packets: checked above, counted with its own QPs
            per_conn.setdefault(ci, set()).add(key)
        print("%-12s %-12s %-8s %-6d %-20s %d" % (key[0] + ">" + key[1], "%d->%d" % (lq, key[2]),
                                                 "0x%05x" % label if label else "-", sport,
                                                 ",".join(str(p) for p in sorted(ports)),
                                                 sum(ports.values())))
        if set(ports) != {sport}:
            errors.append("%s qpn %d->%d: UDP source ports seen %s, predicted %d" %
                          (key[0], lq, key[2], sorted(ports), sport))
    best = max((len(v) for v in per_conn.values()), default=0)
    if best < min_qps:
        errors.append("no connection had %d QPs with packets in the capture (best: %d)" % (min_qps, best))
    # Distinct ports per connection, as seen on the wire (labels mode).
    if mode == "labels":
        for ci, keys in per_conn.items():
            ports = [next(iter(seen[k])) for k in keys]
            if len(set(ports)) != len(ports):
                errors.append("connection %d: two QPs on one UDP source port on the wire: %s" % (ci, ports))
    print("flow-label check (%s): %d connections logged, %d packets (and %d CM MADs to QP1, not "
          "checked), %d QPs seen, best connection %d QPs; IPv6 header flow labels seen: %s" %
          (mode, len(conns), total, mads, len(seen), best,
           sorted(v6_labels) if v6_labels else "none"))
    for e in errors[:30]:
        print("FAIL: " + e)
    if len(errors) > 30:
        print("FAIL: ... and %d more" % (len(errors) - 30))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
