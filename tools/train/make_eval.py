#!/usr/bin/env python3
"""Writes evaluation prompts in the `hypic eval-pic` JSONL format ({"blocks": [...], "answer": "...", ...}).

    python3 tools/train/make_eval.py --seed 1 --count 600 --out tests/fixtures/eval/long_eval_seed1.jsonl
    python3 tools/train/make_eval.py --task qa --seed 1 --count 500 --out tests/fixtures/eval/qa_eval_seed1.jsonl
    python3 tools/train/make_eval.py --task agent --format qwen3.5 --seed 3 --count 40 --out agent_first.jsonl

--task long (the default): the long-memory model's mixed evaluation, question types in turn (single,
multihop, update; "type" names each prompt's): a system block, 2-8 documents drawn from a pool of --pool
documents made for this seed (so documents recur in new orders and combinations, as retrieved chunks
do) and the question tail; --variant picks the documents (default meeting, the shipped model's task).
--task qa: the shipped QA model's single-fact evaluation (hypic-qa-tiny).
--task agent: the tool model's first step (needs transformers): the rendered prompt of an agent task as
one block, its expected first reply (a tool call or the answer) as "answer" (make_goldens.py input).
Seeds 0..999999 are reserved for evaluation (training uses seeds >= 1000000, see task.py); names and
values are random per seed.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import task  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="long", choices=["long", "qa", "agent"])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--count", type=int, default=500)
    ap.add_argument("--pool", type=int, default=40)
    ap.add_argument("--min-docs", type=int, default=2)
    ap.add_argument("--max-docs", type=int, default=8)
    ap.add_argument("--variant", default="meeting", choices=task.VARIANTS,
                    help="--task long: meeting (the shipped hypic-qa-long's: a shared slot moved by later "
                         "documents); facts (the model shipped before it); moved_homes (every multi-hop bridge "
                         "stated twice, the later document wins) (task.py)")
    ap.add_argument("--format", default="qwen3", choices=["qwen3", "qwen3.5"], help="--task agent: chat format")
    ap.add_argument("--out", default="-")
    args = ap.parse_args()
    if args.task == "long":
        prompts = task.long_eval_prompts(args.seed, args.count, args.pool, args.min_docs, args.max_docs,
                                         args.variant)
    elif args.task == "qa":
        prompts = task.eval_prompts(args.seed, args.count, args.pool, args.min_docs, args.max_docs)
    else:
        import agent_task
        prompts = agent_task.first_reply_prompts(args.seed, args.count, args.format)
    f = sys.stdout if args.out == "-" else open(args.out, "w")
    for p in prompts:
        f.write(json.dumps(p, ensure_ascii=False) + "\n")
    if f is not sys.stdout:
        f.close()


if __name__ == "__main__":
    main()
