#!/usr/bin/env python3
"""Where one decode step's device time goes, from an Nsight Compute CSV of a launched run.

    HYPIC_CUDA_GRAPHS=0 ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file run.csv \
        hypic_bench_model --config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights --prefill 8192 --decode 3
    python3 tools/bench/ncu_step.py run.csv
    python3 tools/bench/ncu_step.py run.csv --last   # the last forward instead (a TTFT bench's last request)

A step starts at the embedding launch (embed_kernel); the last complete step before the run's last one is reported
(with --last: the run's last forward, from its embedding launch to the end)
(kernel by kernel in order, then per kernel name), with the sum of the kernels' durations: the time a
captured graph of the step needs at least, without the gaps between launches.
"""
import csv
import io
import sys
from collections import OrderedDict

UNITS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6}


def read(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    start = text.find('"ID"')
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    out = []
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(r["Metric Value"].replace(",", ""))
        out.append((int(r["ID"]), r["Kernel Name"], value * UNITS.get(r.get("Metric Unit", "nsecond"), 1e-3)))
    out.sort()
    return out


def short(name):
    name = name.split("(")[0].replace("void ", "").strip()
    return name.split("::")[-1] if "<" not in name.split("::")[-1] or "::" not in name else name.rsplit("::", 1)[-1]


def main():
    kernels = read(sys.argv[1])
    last = "--last" in sys.argv[2:]
    starts = [i for i, (_, n, _) in enumerate(kernels) if "embed_kernel" in n or "embed_rows" in n]
    if len(starts) < (1 if last else 3):
        sys.exit("no embedding launch in the profile" if last else "fewer than three decode steps in the profile")
    step = kernels[starts[-1]:] if last else kernels[starts[-2]:starts[-1]]
    total = sum(t for _, _, t in step)
    what = "the last forward" if last else "one launched decode step"
    print(f"{what}: {len(step)} kernels, {total:.1f} us of kernel time")
    groups = OrderedDict()
    for _, n, t in step:
        g = groups.setdefault(short(n), [0, 0.0])
        g[0] += 1
        g[1] += t
    print(f"{'kernel':48s} {'count':>6s} {'total us':>10s} {'mean us':>9s} {'share':>6s}")
    for n, (c, t) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print(f"{n[:48]:48s} {c:6d} {t:10.1f} {t / c:9.2f} {100 * t / total:5.1f}%")
    print("\nfirst layers in order:")
    for _, n, t in step[:60]:
        print(f"  {t:8.2f} us  {short(n)}")


if __name__ == "__main__":
    main()
