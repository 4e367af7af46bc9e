#!/usr/bin/env python3
"""The SASS instructions of one kernel with the most warp-stall samples, from Nsight Compute's source page.

    ncu --set full --import-source no -k regex:NAME --launch-count 1 -o REPORT ./program ...
    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > sass.csv
    python3 tools/bench/ncu_top_stalls.py sass.csv [--top 40]

Prints the instruction count and the total of the samples, then the instructions with the most samples: index in
the listing, samples, their share, the running share up to that instruction (in listing order, so a jump in it
marks a region), times executed, the largest stall reason and its samples, and the instruction.
"""
import argparse
import csv
import sys

REASONS = ["stall_barrier", "stall_long_sb", "stall_short_sb", "stall_wait", "stall_mio", "stall_selected",
           "stall_math", "stall_lg", "stall_membar", "stall_branch_resolving", "stall_no_inst",
           "stall_not_selected", "stall_drain", "stall_dispatch"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    with open(a.csv, newline="", encoding="utf-8", errors="replace") as f:
        rows = list(csv.reader(f))
    # The first row names the kernel; the second is the header.
    head = next((i for i, r in enumerate(rows) if "Address" in r and "Source" in r), None)
    if head is None:
        sys.exit(f"{a.csv}: no 'Address' / 'Source' header: not an ncu --page source --csv listing")
    col = {h: i for i, h in enumerate(rows[head])}
    samples_col = col.get("Warp Stall Sampling (All Samples)")
    if samples_col is None:
        sys.exit(f"{a.csv}: no warp stall samples (profile with --set full)")
    data = rows[head + 1:]

    def num(r, k):
        i = col.get(k)
        if i is None or i >= len(r) or not r[i]:
            return 0
        return int(float(r[i]))

    samples = [num(r, "Warp Stall Sampling (All Samples)") for r in data]
    total = sum(samples) or 1
    running, out = 0, []
    for n, (r, s) in enumerate(zip(data, samples)):
        running += s
        reason = max((k for k in REASONS if k in col), key=lambda k: num(r, k), default=None)
        out.append((n, s, running, num(r, "Instructions Executed"), reason, num(r, reason) if reason else 0,
                    r[col["Source"]].strip()))
    print(f"instructions {len(data)} samples {total}")
    for n, s, run, ex, reason, rs, src in sorted(out, key=lambda o: -o[1])[:a.top]:
        print(f"{n:5d} {s:6d} {100 * s / total:5.1f}% cum {100 * run / total:5.1f}% ex {ex:8d} {reason}:{rs}  {src[:80]}")


if __name__ == "__main__":
    main()
