#!/usr/bin/env python3
"""Writes retrieval-QA evaluation prompts in the `hypic eval-pic` JSONL format ({"blocks": [...], "answer": "..."}).

    python3 tools/train/make_eval.py --seed 1 --count 500 > tests/fixtures/eval/qa_eval_seed1.jsonl

Each prompt: a system block, 2-8 documents drawn from a pool of --pool documents made for this seed (so
documents recur across prompts, in new orders and combinations, as retrieved chunks do), and the question
tail; the answer is the value of one fact of one of the chosen documents. Seeds 0..999999 are reserved for
evaluation (training uses seeds >= 1000000, see task.py); names and values are random per seed.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import task  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--count", type=int, default=500)
    ap.add_argument("--pool", type=int, default=40)
    ap.add_argument("--min-docs", type=int, default=2)
    ap.add_argument("--max-docs", type=int, default=8)
    ap.add_argument("--out", default="-")
    args = ap.parse_args()
    f = sys.stdout if args.out == "-" else open(args.out, "w")
    for p in task.eval_prompts(args.seed, args.count, args.pool, args.min_docs, args.max_docs):
        f.write(json.dumps(p, ensure_ascii=False) + "\n")
    if f is not sys.stdout:
        f.close()


if __name__ == "__main__":
    main()
