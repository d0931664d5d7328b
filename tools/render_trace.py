#!/usr/bin/env python3
"""render_trace.py TRACE.json OUT.png [--from-us A --to-us B] [--title T]: draws the Chrome trace
of libsluice-trace-profiler.so as a timeline PNG with gnuplot: one row per QP track (grouped by
process), one bar per work request from its start to its stop, coloured by opcode (translucent:
work requests in flight together on one QP overlap). Times are relative to the first event. Needs
gnuplot (pngcairo or png terminal)."""
import json
import os
import subprocess
import sys
import tempfile

COLORS = {0: "#1f77b4", 1: "#d62728", 4: "#2ca02c"}  # WRITE, WRITE_WITH_IMM, READ
LABELS = {0: "RDMA WRITE", 1: "RDMA WRITE WITH IMM", 4: "RDMA READ"}


def main():
    a = sys.argv[1:]
    if len(a) < 2:
        sys.exit(__doc__)
    src, out = a[0], a[1]
    t_from = float(a[a.index("--from-us") + 1]) if "--from-us" in a else None
    t_to = float(a[a.index("--to-us") + 1]) if "--to-us" in a else None
    title = a[a.index("--title") + 1] if "--title" in a else os.path.basename(src)
    doc = json.load(open(src))
    names, procs, evs = {}, {}, []
    for e in doc["traceEvents"]:
        if e.get("ph") == "X":
            evs.append(e)
        elif e.get("name") == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
        elif e.get("name") == "process_name":
            procs[e["pid"]] = e["args"]["name"]
    if not evs:
        sys.exit(f"{src}: no events")
    t0 = min(e["ts"] for e in evs)
    lo = t_from if t_from is not None else 0.0
    hi = t_to if t_to is not None else max(e["ts"] + e["dur"] for e in evs) - t0
    tracks = sorted({(e["pid"], e["tid"]) for e in evs})
    row = {k: i for i, k in enumerate(tracks)}
    tmp = tempfile.mkdtemp()
    files = {}
    for e in evs:
        s, d = e["ts"] - t0, e["dur"]
        if s + d < lo or s > hi:
            continue
        op = e["args"]["opcode"]
        files.setdefault(op, []).append(f"{max(s, lo)} {min(s + d, hi)} {row[(e['pid'], e['tid'])]}")
    plots = []
    for op, lines in sorted(files.items()):
        p = os.path.join(tmp, f"op{op}.dat")
        open(p, "w").write("\n".join(lines) + "\n")
        plots.append(f"'{p}' using 1:3:1:2:($3-0.35):($3+0.35) with boxxyerror "
                     f"lc rgb '{COLORS.get(op, '#7f7f7f')}' fs transparent solid 0.45 border "
                     f"title '{LABELS.get(op, op)}'")
    ytics = ", ".join(
        f"\"{procs.get(p, 'rank %d' % p).split(' (')[0]} {names.get((p, t), t)}\" {row[(p, t)]}"
        for p, t in tracks)
    script = f"""
set terminal pngcairo size 1400,{160 + 38 * len(tracks)} font 'DejaVu Sans,10' noenhanced
set output '{out}'
set title "{title}"
set xlabel 'time (us)'
set xrange [{lo}:{hi}]
set yrange [-0.7:{len(tracks) - 0.3}]
set ytics ({ytics})
set grid xtics
set key outside top center horizontal
plot {', '.join(plots)}
"""
    subprocess.run(["gnuplot"], input=script.encode(), check=True)
    print(f"{out}: {sum(len(v) for v in files.values())} bars on {len(tracks)} QP tracks, "
          f"{lo:.1f}..{hi:.1f} us")


if __name__ == "__main__":
    main()
