#!/usr/bin/env python3
"""TTFT against arrival rate for each mode of a serve_trace.sh run, as a dependency-free SVG.

Reads OUT_DIR/<mode>_r<k>.json (hypic_bench_serve --mode trace output; each holds its `rate` and
`ttft_ms` percentiles) and draws p50 (solid) and p90 (dashed) per mode with the 1 s SLO line.

Usage: python3 tools/bench/plot_serve.py OUT_DIR OUT.svg [TITLE]
"""
import glob
import json
import os
import sys

COLORS = {"full": "#888888", "prefix": "#1f77b4", "hypic": "#d62728"}


def load(out_dir):
    runs = {}
    for path in sorted(glob.glob(os.path.join(out_dir, "*_r*.json"))):
        mode = os.path.basename(path).split("_r")[0]
        with open(path) as f:
            j = json.load(f)
        runs.setdefault(mode, []).append((j["rate"], j["ttft_ms"]["p50"], j["ttft_ms"]["p90"]))
    for mode in runs:
        runs[mode].sort()
    return runs


def svg(runs, title):
    w, h, left, right, top, bottom = 640, 400, 70, 130, 40, 50
    rates = [r for pts in runs.values() for r, _, _ in pts]
    ymax = max(p90 for pts in runs.values() for _, _, p90 in pts)
    ymax = max(1500.0, ((ymax // 1000) + 1) * 1000)
    xmin, xmax = 0.0, max(rates) + 0.5
    pw, ph = w - left - right, h - top - bottom

    def x(v):
        return left + (v - xmin) / (xmax - xmin) * pw

    def y(v):
        return top + ph - v / ymax * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="22" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="black"/>']
    step = 1000 if ymax > 3000 else 500
    v = 0.0
    while v <= ymax:
        out.append(f'<line x1="{left - 4}" y1="{y(v):.1f}" x2="{left}" y2="{y(v):.1f}" stroke="black"/>')
        out.append(f'<text x="{left - 8}" y="{y(v) + 4:.1f}" text-anchor="end">{v / 1000:g} s</text>')
        v += step
    for r in sorted(set(rates)):
        out.append(f'<text x="{x(r):.1f}" y="{top + ph + 18}" text-anchor="middle">{r:g}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{h - 10}" text-anchor="middle">arrival rate (requests/s)</text>')
    out.append(f'<line x1="{left}" y1="{y(1000):.1f}" x2="{left + pw}" y2="{y(1000):.1f}" stroke="#2ca02c" '
               'stroke-dasharray="2,3"/>')
    out.append(f'<text x="{left + pw + 6}" y="{y(1000) + 4:.1f}" fill="#2ca02c">1 s SLO</text>')
    for i, (mode, pts) in enumerate(sorted(runs.items())):
        c = COLORS.get(mode, "black")
        for k, dash in ((1, ""), (2, ' stroke-dasharray="6,4"')):
            path = " ".join(f"{x(p[0]):.1f},{y(p[k]):.1f}" for p in pts)
            out.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"{dash}/>')
        for p in pts:
            out.append(f'<circle cx="{x(p[0]):.1f}" cy="{y(p[1]):.1f}" r="3" fill="{c}"/>')
        ly = top + 20 + 20 * i
        out.append(f'<line x1="{left + pw + 10}" y1="{ly}" x2="{left + pw + 30}" y2="{ly}" stroke="{c}" stroke-width="2"/>')
        out.append(f'<text x="{left + pw + 36}" y="{ly + 4}">{mode}</text>')
    ly = top + 20 + 20 * len(runs) + 10
    out.append(f'<text x="{left + pw + 10}" y="{ly}">solid: p50</text>')
    out.append(f'<text x="{left + pw + 10}" y="{ly + 16}">dashed: p90</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    runs = load(sys.argv[1])
    if not runs:
        sys.exit(f"no <mode>_r<k>.json files in {sys.argv[1]}")
    title = sys.argv[3] if len(sys.argv) > 3 else "TTFT against arrival rate"
    with open(sys.argv[2], "w") as f:
        f.write(svg(runs, title))


if __name__ == "__main__":
    main()
