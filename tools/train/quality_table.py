#!/usr/bin/env python3
"""docs/quality.md's table per question type and cache mode: runs `hypic eval-pic` on the prompts of each
question type of a mixed evaluation file (make_eval.py's default, "type" on every prompt) and prints
a Markdown table (exact match, top-1 agreement and first-token KL against full recompute, computed tokens).

    python3 tools/train/quality_table.py --model examples/models/hypic-qa-long \
        --prompts tests/fixtures/eval/long_eval_seed1.jsonl [--hypic build/tools/hypic/hypic] \
        [--device auto] [--out quality.json]

Each type runs in its own `hypic eval-pic` process (its own segment stores, warmed by the prompts before
it, as eval-pic does); the "all" rows weigh the types by their prompt counts. The eval-pic command of
every type is printed, so any row can be reproduced alone.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
METRICS = ["exact_match", "top1_agree", "kl_mean", "greedy_match", "computed_tokens_mean", "prompt_tokens_mean"]


def finish(t, proc, res):
    out, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"hypic eval-pic ({t}) failed ({proc.returncode}):\n{err[-3000:]}")
    res[t] = json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--hypic", default=os.path.join(REPO, "build", "tools", "hypic", "hypic"))
    ap.add_argument("--modes", default="full,hypic,naive,noseam")
    ap.add_argument("--decode-tokens", type=int, default=14,
                    help="greedy tokens per prompt: a multi-hop answer (place, value) takes up to 12 with <|im_end|>")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--jobs", type=int, default=1, help="question types evaluated at once (one process each)")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    prompts = [json.loads(line) for line in open(args.prompts) if line.strip()]
    types = sorted({p.get("type", "all") for p in prompts}, key=lambda t: (t != "single", t))
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        running = []
        for t in types:
            path = os.path.join(tmp, f"{t}.jsonl")
            with open(path, "w") as f:
                for p in prompts:
                    if p.get("type", "all") == t:
                        f.write(json.dumps(p, ensure_ascii=False) + "\n")
            cmd = [args.hypic, "eval-pic", "--model", args.model, "--prompts", path, "--modes", args.modes,
                   "--decode-tokens", str(args.decode_tokens), "--device", args.device, "--quiet"]
            print(f"{t}: {' '.join(cmd)}", file=sys.stderr, flush=True)
            if len(running) >= args.jobs:
                finish(*running.pop(0), res)
            running.append((t, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
        for r in running:
            finish(*r, res)
    modes = args.modes.split(",")
    n = {t: res[t]["prompts"] for t in types}
    total = sum(n.values())
    res["all"] = {"prompts": total, "modes": {
        m: {k: sum(res[t]["modes"][m][k] * n[t] for t in types) / total for k in METRICS} for m in modes}}
    print(f"Model `{args.model}`, prompts `{os.path.relpath(args.prompts, REPO)}` ({total}: "
          + ", ".join(f"{n[t]} {t}" for t in types) + f"), device {res[types[0]]['device']}.\n")
    print("| question type | mode | exact match | Δ vs full (points) | top-1 agree | KL (first token) "
          "| greedy match | computed / prompt tokens |")
    print("|---|---|---|---|---|---|---|---|")
    for t in types + (["all"] if len(types) > 1 else []):
        full = res[t]["modes"]["full"]["exact_match"] if "full" in modes else None
        for m in modes:
            s = res[t]["modes"][m]
            d = "" if full is None or m == "full" else f"{100 * (s['exact_match'] - full):+.1f}"
            print(f"| {t} ({res[t]['prompts']}) | {m} | **{s['exact_match']:.3f}** | {d} | {s['top1_agree']:.3f} "
                  f"| {s['kl_mean']:.2g} | {s['greedy_match']:.3f} | {s['computed_tokens_mean']:.1f} / "
                  f"{s['prompt_tokens_mean']:.1f} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
