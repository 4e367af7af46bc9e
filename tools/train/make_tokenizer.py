#!/usr/bin/env python3
"""Trains the byte-level BPE tokenizer of the QA model (tokenizers package) and writes tokenizer.json and
tokenizer_config.json (with the Qwen3 chat template) into --out.

    python3 tools/train/make_tokenizer.py --out examples/models/hypic-qa-tiny --vocab 1024

Qwen's pre-tokenizer (its split regex: digits one per token, a space glued to the following word) and
byte-level alphabet; <|endoftext|>, <|im_start|>, <|im_end|> special, <tool_call>, </tool_call>, <think>,
</think> added (as in Qwen3). The BPE corpus is task text (tools/train/task.py, tokenizer seed) in which
a space before a capital letter is replaced by a newline, so no merge glues a space to a capitalised
word: " Drast" encodes as " " + "Drast"'s own pieces, and a name in a document, in a question and in
an answer is the same token sequence (copying the answer is then a token-for-token copy).
Deterministic: fixed seed, fixed corpus.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import random
import re
import sys

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

import task  # noqa: E402

QWEN_TOKENIZER_CONFIG = "/work/shared/fixtures/qwen3-tokenizer/tokenizer_config.json"
QWEN_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED_TOKENS = ["<tool_call>", "</tool_call>", "<think>", "</think>"]


def corpus(n: int = 6000):
    rng = random.Random(task.TOKENIZER_SEED)
    special = re.compile("|".join(re.escape(t) for t in SPECIAL_TOKENS))
    for _ in range(n):
        blocks, turns = task.train_sample(rng, rng.randint(1, 4), 3, doc_style="v1")  # as the shipped tokenizer was built
        text = "".join(blocks) + "".join(t + a + "<|im_end|>" + task.FOLLOWUP_HEAD for t, a in turns)
        text = special.sub("\n", text)
        yield re.sub(r" (?=[A-Z])", "\n", text)
    yield "The user asks and the assistant answers. user assistant system tool"


def build(vocab_total: int) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False, ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    n_added = len(SPECIAL_TOKENS) + len(ADDED_TOKENS)
    trainer = trainers.BpeTrainer(vocab_size=vocab_total - n_added, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS])
    return tok


def tokenizer_config(tok: Tokenizer) -> dict:
    with open(QWEN_TOKENIZER_CONFIG) as f:
        ref = json.load(f)
    cfg = copy.deepcopy(ref)
    cfg["added_tokens_decoder"] = {
        str(tok.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                  "single_word": False, "special": t in SPECIAL_TOKENS}
        for t in SPECIAL_TOKENS + ADDED_TOKENS}
    cfg["additional_special_tokens"] = ["<|im_start|>", "<|im_end|>"]
    cfg["eos_token"] = "<|im_end|>"
    cfg["pad_token"] = "<|endoftext|>"
    cfg["bos_token"] = None
    cfg["model_max_length"] = 4096
    return {k: cfg[k] for k in ref.keys()}


def write(out: str, vocab_total: int) -> Tokenizer:
    os.makedirs(out, exist_ok=True)
    tok = build(vocab_total)
    tok.save(os.path.join(out, "tokenizer.json"), pretty=True)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(tok), f, indent=2, ensure_ascii=False)
        f.write("\n")
    return tok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab", type=int, default=1024, help="total vocabulary incl. the 7 added tokens")
    args = ap.parse_args()
    tok = write(args.out, args.vocab)
    print(f"vocab {tok.get_vocab_size(with_added_tokens=True)} -> {args.out}")
    for s in ["The code of Kelmora is 5831. Pelu lives in Drast.\n", "Question: Where does Pelu live?<|im_end|>"]:
        print([tok.id_to_token(i) for i in tok.encode(s).ids])


if __name__ == "__main__":
    main()
