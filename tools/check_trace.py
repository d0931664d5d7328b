#!/usr/bin/env python3
"""check_trace.py FILE [--min-tracks N] [--min-events N]: checks a Chrome trace written by
libsluice-trace-profiler.so (through sluice-bench --trace or NCCL): it parses as JSON, every
complete event ("X") has pid/tid/ts/dur with dur >= 0 and a NET/IB QP event's args, its tid is
the QP number it names, and every (pid, tid) track carries exactly one thread_name "QP <n>" -
one track per QP. Prints a one-line summary; exit 1 on the first violation."""
import json
import sys


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    path = args[0]
    min_tracks = int(args[args.index("--min-tracks") + 1]) if "--min-tracks" in args else 1
    min_events = int(args[args.index("--min-events") + 1]) if "--min-events" in args else 1
    with open(path) as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    tracks, names, count, per_track = set(), {}, 0, {}
    for e in events:
        ph = e.get("ph")
        if ph == "X":
            for k in ("pid", "tid", "ts", "dur", "name", "args"):
                if k not in e:
                    sys.exit(f"{path}: event without {k}: {e}")
            if e["dur"] < 0:
                sys.exit(f"{path}: negative duration: {e}")
            a = e["args"]
            if a.get("qp") != e["tid"]:
                sys.exit(f"{path}: event on track {e['tid']} names QP {a.get('qp')}")
            for k in ("wr_id", "opcode", "length", "device"):
                if k not in a:
                    sys.exit(f"{path}: event args without {k}: {e}")
            tracks.add((e["pid"], e["tid"]))
            per_track[(e["pid"], e["tid"])] = per_track.get((e["pid"], e["tid"]), 0) + 1
            count += 1
        elif ph == "M" and e.get("name") == "thread_name":
            key = (e["pid"], e["tid"])
            if key in names:
                sys.exit(f"{path}: track {key} named twice")
            names[key] = e["args"]["name"]
    for key in tracks:
        if names.get(key) != f"QP {key[1]}":
            sys.exit(f"{path}: track {key} is named {names.get(key)!r}, not 'QP {key[1]}'")
    if set(names) != tracks:
        sys.exit(f"{path}: named tracks {sorted(set(names) - tracks)} carry no event")
    if len(tracks) < min_tracks or count < min_events:
        sys.exit(f"{path}: {count} events on {len(tracks)} tracks; want >= {min_events} on >= "
                 f"{min_tracks}")
    ranks = sorted({p for p, _ in tracks})
    print(f"{path}: {count} work requests on {len(tracks)} QP tracks (one per QP) in "
          f"{len(ranks)} process(es) {ranks}")


if __name__ == "__main__":
    main()
