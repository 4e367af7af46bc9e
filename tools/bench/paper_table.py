#!/usr/bin/env python3
"""docs/paper_table.md's tables and plot from the JSON that tools/bench/paper_table.sh writes (one
hypic_bench_ttft report per workload and case).

    python3 tools/bench/paper_table.py RUN_DIR [--png docs/paper_table.png] [--state-png docs/paper_state.png]

Prints the markdown tables on stdout: warm TTFT p50/p90 per workload and mode with computed tokens and
block hit rate, the hypic-vs-prefix and hypic-vs-full ratios of p50, and the cold request's TTFT per mode
with hypic's ratio to full (the cost of building every block's cache entry: isolated prefills, transfer
operators, seams), and the composed state's distance from full recompute (the state case: relative error
at layer 0, averaged over the linear and over the attention layers, at the last layer; first-token KL and
top-1 agreement). --png draws warm p50 TTFT per workload and mode, --state-png the state error by layer
(both need matplotlib)."""
import argparse
import json
import os

WORKLOADS = [("hotpotqa", "HotpotQA-like: 8-12 chunks of ~150 tokens"),
             ("triviaqa", "TriviaQA-like: 4-6 passages of ~500"),
             ("multinews", "MultiNews-like: 3-6 documents of ~1500"),
             ("govreport", "GovReport-like: 16-32 chunks of ~512 (one or two long reports)")]
MODES = ["full", "prefix", "hypic", "naive", "noseam"]


def load(run_dir, name, case):
    path = os.path.join(run_dir, f"{name}_{case}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def reports(run_dir, case):
    """(name, label, report, {mode: its entry}) for every workload that has a report of `case`."""
    for name, label in WORKLOADS:
        rep = load(run_dir, name, case)
        if rep is not None:
            yield name, label, rep, {m["mode"]: m for m in rep[case]["modes"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir")
    ap.add_argument("--png", default="")
    ap.add_argument("--state-png", default="")
    args = ap.parse_args()

    warm = {}
    print("| workload | prompt tokens (mean) | mode | TTFT p50 ms | TTFT p90 ms | computed tokens (mean) | block hit rate |")
    print("|---|---|---|---|---|---|---|")
    for name, label, rep, modes in reports(args.run_dir, "rag"):
        warm[name] = modes
        for mode in MODES:
            if mode not in modes:
                continue
            m = modes[mode]
            print(f"| {label} | {rep['workload']['mean_prompt_tokens']:.0f} | {mode} | {m['ttft_ms']['p50']:.1f} | "
                  f"{m['ttft_ms']['p90']:.1f} | {m['mean_computed_tokens']:.0f} | {m['hit_rate']:.2f} |")
    print()
    print("| workload | hypic p50 vs prefix | hypic p50 vs full | hypic p90 vs prefix |")
    print("|---|---|---|---|")
    ratios = []
    for name, label in WORKLOADS:
        if name not in warm or not {"full", "prefix", "hypic"} <= warm[name].keys():
            continue
        t = {k: v["ttft_ms"] for k, v in warm[name].items()}
        r = t["prefix"]["p50"] / t["hypic"]["p50"]
        ratios.append(r)
        print(f"| {label} | {r:.2f}x lower | {t['full']['p50'] / t['hypic']['p50']:.2f}x lower | "
              f"{t['prefix']['p90'] / t['hypic']['p90']:.2f}x lower |")
    if ratios:
        print(f"| mean over workloads | {sum(ratios) / len(ratios):.2f}x lower | | |")
    print()
    print("| workload | cold TTFT p50 ms: full | prefix | hypic | hypic / full (mean, max over requests) |")
    print("|---|---|---|---|---|")
    for name, label, rep, modes in reports(args.run_dir, "cold"):
        r = rep["cold"]["ratio_to_full"]["hypic"]
        print(f"| {label} | {modes['full']['ttft_ms']['p50']:.1f} | {modes['prefix']['ttft_ms']['p50']:.1f} | "
              f"{modes['hypic']['ttft_ms']['p50']:.1f} | {r['mean']:.3f}, {r['max']:.3f} |")

    states = {n: load(args.run_dir, n, "state") for n, _ in WORKLOADS}
    states = {n: r["state"] for n, r in states.items() if r is not None}
    if states:
        print()
        print("| workload | mode | error at layer 0 | mean over linear layers | mean over attention layers | "
              "last layer | first-token KL | top-1 agree |")
        print("|---|---|---|---|---|---|---|---|")
        for name, label in WORKLOADS:
            if name not in states:
                continue
            kinds = states[name]["layer_kinds"]
            for m in states[name]["modes"]:
                e = m["error_by_layer"]
                lin = [x for x, k in zip(e, kinds) if k == "linear"]
                att = [x for x, k in zip(e, kinds) if k == "attention"]
                print(f"| {label} | {m['mode']} | {e[0]:.2g} | {sum(lin) / len(lin):.3g} | {sum(att) / len(att):.3g} | "
                      f"{e[-1]:.3g} | {m['first_token_kl']:.2g} | {m['top1_agree']:.2f} |")

    if args.state_png and states:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 4.2), dpi=120)
        styles = {"hypic": "-", "noseam": "--", "naive": ":"}
        for name, _ in WORKLOADS:
            if name not in states:
                continue
            for m in states[name]["modes"]:
                ax.plot(range(len(m["error_by_layer"])), m["error_by_layer"], styles.get(m["mode"], "-"),
                        label=f"{m['mode']}, {name}", linewidth=1.2)
        kinds = next(iter(states.values()))["layer_kinds"]
        for l, k in enumerate(kinds):
            if k == "attention":
                ax.axvline(l, color="grey", alpha=0.2, linewidth=3)
        ax.set_yscale("log")
        ax.set_xlabel("layer (grey: full attention)")
        ax.set_ylabel("relative error vs full recompute")
        ax.set_title("Composed state by layer, Qwen3.5-35B-A3B shape, bf16 (random weights)")
        ax.legend(fontsize=6, ncol=3)
        fig.tight_layout()
        fig.savefig(args.state_png)

    if args.png and warm:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        names = [n for n, _ in WORKLOADS if n in warm]
        shown = [m for m in ("full", "prefix", "hypic") if all(m in warm[n] for n in names)]
        fig, ax = plt.subplots(figsize=(8, 4.2), dpi=120)
        width = 0.8 / len(shown)
        for i, mode in enumerate(shown):
            xs = [j + (i - (len(shown) - 1) / 2) * width for j in range(len(names))]
            p50 = [warm[n][mode]["ttft_ms"]["p50"] for n in names]
            p90 = [warm[n][mode]["ttft_ms"]["p90"] for n in names]
            bars = ax.bar(xs, p50, width, label=f"{mode} (p50; line: p90)")
            ax.scatter(xs, p90, marker="_", s=200, color="black", zorder=3)
            for x, v in zip(xs, p50):
                ax.text(x, v, f"{v:.0f}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels([dict(WORKLOADS)[n].split(":")[0] for n in names])
        ax.set_ylabel("TTFT (ms)")
        ax.set_title("Warm TTFT by cache mode, Qwen3.5-35B-A3B shape, one H200 (random weights)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.png)


if __name__ == "__main__":
    main()
