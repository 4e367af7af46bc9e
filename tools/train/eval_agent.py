#!/usr/bin/env python3
"""Runs generated agent tasks through `hypic run` (examples/templates/tool_agent.yaml, hypic's own calculator
and search_docs tools) in both chat formats and reports final-answer accuracy, right-tool rate and no-tool
rate per format and per kind of task.

    python3 tools/train/eval_agent.py --model examples/models/hypic-agent-tiny --seed 7 --count 240 \
        [--hypic build/tools/hypic/hypic] [--device auto] [--out agent_eval.json]

Tasks (agent_task.eval_tasks, an evaluation seed: names and numbers training never saw), the kinds in
turn: calc (calculator), docs (search_docs, then the answer from the returned chunks), docs_calc
(search_docs, then calculator) and direct (no tool). The seed's document collection (40 short documents,
one file each) is ingested with `hypic ingest` into a fresh database that `hypic run --docs-db` searches.
Format qwen3 uses the model directory's own chat template; qwen3.5 passes
tests/fixtures/chat/qwen3.5_chat_template.jinja with --chat-template. Before the runs the script checks
that hypic renders the same prompt as the training data (agent_task.Renderer, transformers' Jinja).

Scores: answer = the run's final answer equals the expected one (trimmed); right tool = the tools called,
in order, are exactly the expected ones (tasks that need a tool); no tool = no call at all (direct tasks).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agent_task  # noqa: E402

TEMPLATE = os.path.join(agent_task.REPO, "examples", "templates", "tool_agent.yaml")


def format_args(fmt: str):
    return [] if fmt == "qwen3" else ["--chat-template", agent_task.TEMPLATE_FILES[fmt]]


def check_prompt(hypic, model, fmt, question, tmp):
    vars_path = os.path.join(tmp, "one.json")
    with open(vars_path, "w") as f:
        json.dump({"question": question}, f)
    out = subprocess.run([hypic, "render", TEMPLATE, "--vars", vars_path, "--model-dir", model] + format_args(fmt),
                         capture_output=True, text=True, check=True).stdout
    plan = json.loads(out)
    text = "".join(b["text"] for b in plan["blocks"]) + plan["generation_prompt"]
    want = agent_task.Renderer(fmt).prompt(question)
    if text != want:
        raise SystemExit(f"{fmt}: hypic renders another prompt than the training data:\n{text!r}\nvs\n{want!r}")


def score(tasks, reports):
    by = {}
    for t, r in zip(tasks, reports):
        called = [c["name"] for c in r["tool_calls"]]
        s = by.setdefault(t["kind"], {"n": 0, "answer": 0, "right_tool": 0, "no_tool": 0})
        s["n"] += 1
        s["answer"] += r["answer"].strip() == t["answer"].strip()
        if t["tools"]:
            s["right_tool"] += called == t["tools"] and all(c["ok"] for c in r["tool_calls"])
        else:
            s["no_tool"] += not called
    need = [k for k in by if k != "direct"]
    n_all = sum(s["n"] for s in by.values())
    n_need = sum(by[k]["n"] for k in need)
    total = {
        "n": n_all,
        "answer": sum(s["answer"] for s in by.values()) / max(1, n_all),
        "right_tool": sum(by[k]["right_tool"] for k in need) / max(1, n_need),
        "no_tool": by["direct"]["no_tool"] / by["direct"]["n"] if "direct" in by else None,
    }
    per_kind = {k: {"n": s["n"], "answer": s["answer"] / s["n"],
                    "right_tool" if k != "direct" else "no_tool": (s["right_tool"] if k != "direct" else s["no_tool"]) / s["n"]}
                for k, s in sorted(by.items())}
    return total, per_kind


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--hypic", default=os.path.join(agent_task.REPO, "build", "tools", "hypic", "hypic"))
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--count", type=int, default=240, help="tasks per format")
    ap.add_argument("--formats", default="qwen3,qwen3.5")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", default="", help="JSON with the scores and every run's report")
    ap.add_argument("--show", type=int, default=4, help="print this many runs per format")
    ap.add_argument("--parallel", action="store_true", help="run the formats at once (one process each)")
    args = ap.parse_args()
    collection, tasks = agent_task.eval_tasks(args.seed, args.count)
    results = {"seed": args.seed, "model": args.model, "formats": {}}
    with tempfile.TemporaryDirectory() as tmp:
        docs = os.path.join(tmp, "docs")
        os.makedirs(docs)
        for path, text, _ in collection:
            with open(os.path.join(docs, path), "w") as f:
                f.write(text + "\n")
        db = os.path.join(tmp, "docs.db")
        subprocess.run([args.hypic, "ingest", "--db", db, "--dir", docs, "--tokenizer",
                        os.path.join(args.model, "tokenizer.json"), "--quiet"], check=True, capture_output=True)
        vars_path = os.path.join(tmp, "vars.json")
        with open(vars_path, "w") as f:
            json.dump([{"question": t["question"]} for t in tasks], f)
        procs = []
        for fmt in args.formats.split(","):
            check_prompt(args.hypic, args.model, fmt, tasks[0]["question"], tmp)
            cmd = [args.hypic, "run", TEMPLATE, "--vars", vars_path, "--model", args.model, "--docs-db", db,
                   "--device", args.device, "--json", "--quiet"] + format_args(fmt)
            print(f"{fmt}: {' '.join(cmd)}", file=sys.stderr, flush=True)
            procs.append((fmt, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
            if not args.parallel:
                procs[-1] = (fmt, procs[-1][1].communicate(), procs[-1][1].returncode)
        for item in procs:
            if args.parallel:
                fmt, p = item
                item = (fmt, p.communicate(), p.returncode)
            fmt, (stdout, stderr), code = item
            if code:
                raise SystemExit(f"hypic run ({fmt}) failed ({code}):\n{stderr[-3000:]}")
            reports = json.loads(stdout)
            if isinstance(reports, dict):
                reports = [reports]
            total, per_kind = score(tasks, reports)
            results["formats"][fmt] = {"total": total, "per_kind": per_kind,
                                       "runs": [{"task": t, "answer": r["answer"], "tool_calls": r["tool_calls"],
                                                 "steps": r["steps"], "finish_reason": r["finish_reason"]}
                                                for t, r in zip(tasks, reports)]}
            for t, r in list(zip(tasks, reports))[: args.show]:
                calls = "; ".join(f"{c['name']}({json.dumps(c['arguments'])}) -> {c['result'][:60]!r}"
                                  for c in r["tool_calls"])
                print(f"  [{fmt}] {t['question']!r} -> {r['answer']!r} (want {t['answer']!r}) {calls}", file=sys.stderr)
    print(f"| format | tasks | final answer right | right tool (tasks that need one) | no tool (direct tasks) |")
    print("|---|---|---|---|---|")
    for fmt, r in results["formats"].items():
        t = r["total"]
        no_tool = "-" if t["no_tool"] is None else f"{t['no_tool']:.3f}"
        print(f"| {fmt} | {t['n']} | {t['answer']:.3f} | {t['right_tool']:.3f} | {no_tool} |")
    print()
    print("| format | kind | tasks | final answer right | right tool / no tool |")
    print("|---|---|---|---|---|")
    for fmt, r in results["formats"].items():
        for k, s in r["per_kind"].items():
            tool = s.get("right_tool", s.get("no_tool"))
            print(f"| {fmt} | {k} | {s['n']} | {s['answer']:.3f} | {tool:.3f} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
