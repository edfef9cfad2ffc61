#!/usr/bin/env python3
"""Two (or more) seatfence builds side by side, alternating, on one machine.

    bench/ab.py ROUNDS BIN_A,BIN_B -- bench holds --via http --duration 6 --seats 100000 --json
    UNIT=confirmed bench/ab.py 2 old/seatfence,new/seatfence -- bench payments --inflight 128 --duration 8 --json

Each round runs every binary once, in turn, with the same arguments (a
`seatfence bench … --json` command, which starts its own cluster), and
prints the bench's figures plus the CPU the run cost: user + system time
of the bench and of every process it started and waited for (its nodes,
the mock gateway), per `UNIT` (a field of the JSON, `granted` by default).
This VM's speed drifts within minutes, so compare binaries pairwise within
a round, and prefer CPU per unit to a rate: both cores are saturated, so
the rate follows the CPU a request costs, with less noise.
"""
import json
import os
import resource
import subprocess
import sys
import tempfile


def main() -> None:
    if len(sys.argv) < 5 or sys.argv[3] != "--":
        sys.exit(__doc__)
    rounds, bins, args = int(sys.argv[1]), sys.argv[2].split(","), sys.argv[4:]
    unit = os.environ.get("UNIT", "granted")
    fields = ("holds_per_sec", "writes_per_sec", "bookings_per_sec", "p50_ms", "p99_ms", "hold_p99_ms",
              "total_p99_ms", "granted", "confirmed", "conflicts", "errors")
    for _ in range(rounds):
        for b in bins:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            # A file, not a pipe: a node outliving the bench would hold a pipe open.
            with tempfile.TemporaryFile("w+") as out:
                subprocess.run([b] + args, stdout=out, stderr=subprocess.DEVNULL, check=False)
                out.seek(0)
                lines = out.read().strip().splitlines()
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            try:
                d = json.loads(lines[-1])
            except (IndexError, ValueError):
                print(b, "no JSON answer", lines[-3:], flush=True)
                continue
            shown = " ".join(
                f"{k}={d[k]:.1f}" if isinstance(d[k], float) else f"{k}={d[k]}"
                for k in fields if k in d)
            per = 1e6 * cpu / (d.get(unit) or 1)
            print(f"{b} {shown} cpu_s={cpu:.1f} cpu_us_per_{unit}={per:.0f}", flush=True)


if __name__ == "__main__":
    main()
