#!/usr/bin/env python3
"""Where a window's wall time goes on the GPU, from a libhypic_kernel_trace.so trace (kernel_trace.cc).

    python3 tools/bench/kernel_gaps.py run.trace                 # the cudaProfilerStart .. Stop range
    python3 tools/bench/kernel_gaps.py run.trace --graph-step 2  # the kernels of the 2nd-last graph launch

Prints the window's span, the GPU's busy time (the union of the kernels, copies and sets) and its idle gaps:
their sum, their sizes, the largest with the kernels either side and the runtime calls the host was in
meanwhile; then the kernels by kind (routed experts, state chains, dense products by cuBLAS and by hypic,
attention, the rest) and by name (count, time, the idle time before them) and the host's runtime calls.
"""
import argparse
import collections
import sys


def load(path):
    recs = collections.defaultdict(list)
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            kind, rest = line.rstrip("\n").split(";", 1)
            if kind == "K":
                s, e, stream, node, corr, grid, block, name = rest.split(";", 7)
                recs["K"].append(dict(s=int(s), e=int(e), stream=int(stream), node=int(node), corr=int(corr),
                                      grid=int(grid), block=int(block), name=name))
            elif kind in ("M", "S", "Y"):
                f4 = rest.split(";")
                recs[kind].append(dict(s=int(f4[0]), e=int(f4[1]), stream=int(f4[2]), extra=f4[3:]))
            elif kind == "A":
                s, e, corr, tid, name = rest.split(";", 4)
                recs["A"].append(dict(s=int(s), e=int(e), corr=int(corr), tid=int(tid), name=name))
    for v in recs.values():
        v.sort(key=lambda r: r["s"])
    return recs


# Kinds of hypic's kernels by name (first match wins), for comparing runs at a glance.
KINDS = [
    ("routed experts", ("moe_sm90", "moe_grouped", "moe_small", "moe_decode", "moe_tiled", "moe_down", "moe_gate")),
    ("state chains", ("state_chain",)),
    ("dense products, cuBLAS", ("nvjet", "gemvx", "gemmk", "cutlass", "xmma", "sm90_gemm", "Kernel2")),
    ("dense products, hypic", ("skinny_sm90", "gemv_kernel")),
    ("attention", ("attention_", "split_combine", "decode_attn")),
    ("GDN walks and recurrences", ("gdn_", "delta_rule", "wy_", "chunk")),
]


def kind_of(name):
    for kind, keys in KINDS:
        if any(k in name for k in keys):
            return kind
    return "the rest"


def short(name, n=60):
    return name if len(name) <= n else name[: n - 3] + "..."


def window(recs, graph_step):
    api = recs["A"]
    if graph_step:
        launches = [a for a in api if a["name"].startswith("cudaGraphLaunch")]
        if len(launches) < graph_step:
            sys.exit(f"only {len(launches)} graph launches in the trace")
        corr = launches[-graph_step]["corr"]
        ks = [k for k in recs["K"] if k["corr"] == corr]
        if not ks:
            sys.exit("that graph launch has no kernel records")
        return ks[0]["s"], max(k["e"] for k in ks), f"graph launch {graph_step} from the end"
    starts = [a for a in api if a["name"].startswith("cudaProfilerStart")]
    stops = [a for a in api if a["name"].startswith("cudaProfilerStop")]
    if not starts or not stops:
        sys.exit("no cudaProfilerStart / Stop in the trace: pass --graph-step")
    return starts[-1]["e"], stops[-1]["s"], "cudaProfilerStart .. Stop"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--graph-step", type=int, default=0)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--list", type=str, default="",
                    help="FROM:TO: also list the window's kernels FROM..TO-1 in start order, with their start, end "
                         "and own share relative to the window (us)")
    a = ap.parse_args()
    recs = load(a.trace)
    w0, w1, what = window(recs, a.graph_step)
    inside = lambda r: r["s"] >= w0 and r["e"] <= w1
    ks = [k for k in recs["K"] if inside(k)]
    dev = sorted([dict(k, kind="K") for k in ks] + [dict(m, kind=t, name=t) for t in "MS" for m in recs[t] if inside(m)],
                 key=lambda r: r["s"])
    if not dev:
        sys.exit("no device work in the window")
    span = (w1 - w0) / 1e3
    first, last = dev[0]["s"], max(r["e"] for r in dev)
    # busy = union of intervals; gaps = the idle stretches between them
    busy, gaps, cur_e, prev = 0, [], None, None
    for r in dev:
        if cur_e is None:
            cur_s, cur_e, prev = r["s"], r["e"], r
            continue
        if r["s"] > cur_e:
            busy += cur_e - cur_s
            gaps.append((r["s"] - cur_e, cur_e, prev, r))
            cur_s, cur_e = r["s"], r["e"]
        elif r["e"] > cur_e:
            cur_e = r["e"]
        if r["e"] >= cur_e:
            prev = r
    busy += cur_e - cur_s
    idle = sum(g[0] for g in gaps)
    print(f"window ({what}): {span:.1f} us")
    print(f"  host lead before the first device work: {(first - w0) / 1e3:.1f} us; after the last: {(w1 - last) / 1e3:.1f} us")
    print(f"  device work: {len(ks)} kernels, {len(dev) - len(ks)} copies/sets; busy {busy / 1e3:.1f} us, "
          f"sum of kernel durations {sum(k['e'] - k['s'] for k in ks) / 1e3:.1f} us")
    print(f"  idle between the first and last device work: {idle / 1e3:.1f} us in {len(gaps)} gaps")
    edges = [1, 2, 4, 8, 16, 50, 200, 1e9]
    lo = 0
    for hi in edges:
        sel = [g[0] for g in gaps if lo * 1e3 <= g[0] < hi * 1e3]
        label = f"{lo}-{hi} us" if hi < 1e9 else f">= {lo} us"
        print(f"    gaps {label:>12}: {len(sel):5d}, {sum(sel) / 1e3:9.1f} us")
        lo = hi
    api = [x for x in recs["A"] if x["e"] >= w0 and x["s"] <= w1]
    print(f"\nthe {a.top} largest gaps (us; before -> after; the host's runtime calls meanwhile):")
    for g, at, p, n in sorted(gaps, key=lambda g: -g[0])[: a.top]:
        during = collections.Counter(x["name"] for x in api if x["s"] < at + g and x["e"] > at)
        calls = ", ".join(f"{c}x {nm}" if c > 1 else nm for nm, c in during.most_common(4))
        print(f"  {g / 1e3:8.1f} at +{(at - w0) / 1e3:8.1f}  {short(p['name'], 40)} -> {short(n['name'], 40)}  [{calls}]")
    # A kernel's own share of the timeline: how far it moves the latest end of device work (kernels that
    # overlap their predecessor, as programmatic launches do, count only past its end).
    by = collections.OrderedDict()
    before = {id(g[3]): g[0] for g in gaps}
    own_of, end = {}, None
    for r in sorted(dev, key=lambda r: r["e"]):
        own_of[id(r)] = max(0, r["e"] - (r["s"] if end is None else max(end, r["s"])))
        end = r["e"] if end is None else max(end, r["e"])
        e = by.setdefault(r["name"], [0, 0, 0, 0])
        e[0] += 1
        e[1] += r["e"] - r["s"]
        e[2] += before.get(id(r), 0)
        e[3] += own_of[id(r)]
    kinds = collections.OrderedDict()
    for name, (c, t, gb, own) in by.items():
        k = kinds.setdefault("copies and sets" if name in ("M", "S") else kind_of(name), [0, 0, 0, 0])
        for i, v in enumerate((c, t, gb, own)):
            k[i] += v
    print("\nkernels by kind: count, total us, idle before them us, own share of the timeline us")
    for kind, (c, t, gb, own) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
        print(f"  {kind:60s} {c:5d} {t / 1e3:10.1f} {gb / 1e3:9.1f} {own / 1e3:9.1f}")
    print("\nkernels by name: count, total us, mean us, idle before them us, own share of the timeline us")
    for name, (c, t, gb, own) in sorted(by.items(), key=lambda kv: -kv[1][1])[:40]:
        print(f"  {short(name):60s} {c:5d} {t / 1e3:10.1f} {t / c / 1e3:8.2f} {gb / 1e3:9.1f} {own / 1e3:9.1f}")
    print("\nhost runtime calls in the window: count, total us")
    hc = collections.Counter()
    ht = collections.Counter()
    for x in api:
        hc[x["name"]] += 1
        ht[x["name"]] += min(x["e"], w1) - max(x["s"], w0)
    for name, t in ht.most_common(a.top):
        print(f"  {name:50s} {hc[name]:6d} {t / 1e3:10.1f}")
    syncs = [y for y in recs["Y"] if y["e"] >= w0 and y["s"] <= w1]
    if a.list:
        lo_i, hi_i = (int(x) for x in a.list.split(":"))
        order = [r for r in dev if r["kind"] == "K"]  # dev is in start order
        print(f"\nkernels {lo_i}..{hi_i - 1} by start: start, end, duration, own share (us), grid x block")
        for i, r in enumerate(order[lo_i:hi_i], lo_i):
            print(f"  {i:4d} {(r['s'] - w0) / 1e3:9.2f} {(r['e'] - w0) / 1e3:9.2f} {(r['e'] - r['s']) / 1e3:7.2f} "
                  f"{own_of[id(r)] / 1e3:7.2f}  {r['grid']:6d} x {r['block']:4d}  {short(r['name'], 70)}")
    if syncs:
        print(f"\nsynchronisations in the window: {len(syncs)}, {sum(y['e'] - y['s'] for y in syncs) / 1e3:.1f} us")


if __name__ == "__main__":
    main()
