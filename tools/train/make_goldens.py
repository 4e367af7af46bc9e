#!/usr/bin/env python3
"""Greedy-answer goldens of a shipped model (hypic-qa-tiny, hypic-qa-long, hypic-agent-tiny), computed by
transformers (Qwen3NextForCausalLM, fp32, eager attention, full forward per step, no cache, CPU), for
tests/runtime/trained_qa_model_test.cc. The agent model's prompts: tests/fixtures/eval/agent_first_seed5.jsonl
(the rendered prompt as one block, the expected first reply as the answer; --max-new 72: a call is up to 67 tokens).

    python3 tools/train/make_goldens.py --model examples/models/hypic-qa-tiny \
        --prompts tests/fixtures/eval/qa_eval_seed1.jsonl --count 12 --out examples/models/hypic-qa-tiny/golden.json

Per prompt: the blocks, the answer, the prompt ids (each block tokenized on its own, concatenated), the
greedy ids up to and including the first <|im_end|> (at most --max-new), the decoded answer, the top-2
logit margin of each greedy step (how robust the argmax is), and the first step's top-5 (id, logit).
Also checks transformers' greedy answer == the reference answer and reports the exact match.
"""
import argparse
import json
import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--count", type=int, default=12)
    ap.add_argument("--types", default="", help="only prompts of these question types (comma-separated, e.g. "
                                                "single,update: the golden test also requires the right answer)")
    ap.add_argument("--max-new", type=int, default=8)
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (the results do not depend on it beyond "
                                                           "float rounding far below the test tolerance)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    stop = {tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")}
    m = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32,
                                                          attn_implementation="eager").eval()
    prompts = [json.loads(line) for line in open(args.prompts)]
    if args.types:
        prompts = [p for p in prompts if p.get("type") in args.types.split(",")]
    prompts = prompts[: args.count]
    cases, exact = [], 0
    for p in prompts:
        ids = [i for b in p["blocks"] for i in tok.encode(b, add_special_tokens=False).ids]
        seq, gen, margins, top5 = list(ids), [], [], None
        for t in range(args.max_new):
            lg = m(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1].float()
            v, i = lg.topk(5)
            if t == 0:
                top5 = [[int(a), float(b)] for a, b in zip(i, v)]
            margins.append(float(v[0] - v[1]))
            gen.append(int(i[0]))
            seq.append(int(i[0]))
            if int(i[0]) in stop:
                break
        cut = next((k for k, x in enumerate(gen) if x in stop), len(gen))
        text = tok.decode(gen[:cut], skip_special_tokens=False).strip()
        exact += text == p["answer"].strip()
        cases.append({"blocks": p["blocks"], "answer": p["answer"], "input_ids": ids, "greedy_ids": gen,
                      "greedy_text": text, "greedy_margins": margins, "first_top5": top5})
    out = {
        "description": "Greedy answers of transformers' Qwen3NextForCausalLM (fp32, eager, full forward per step, "
                       "no cache) on the first prompts of the evaluation file. input_ids: each block tokenized on "
                       "its own, concatenated. greedy_ids end at the first <|im_end|>.",
        "prompts_file": os.path.relpath(args.prompts, os.path.join(os.path.dirname(__file__), "..", "..")),
        "tolerance_first_top5_logit": 1e-3,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "exact_match": exact / len(prompts),
        "cases": cases,
    }
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{len(cases)} goldens -> {args.out}; transformers exact match {exact}/{len(prompts)}; "
          f"min greedy margin {min(min(c['greedy_margins']) for c in cases):.3f}")


if __name__ == "__main__":
    main()
