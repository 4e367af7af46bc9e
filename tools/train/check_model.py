#!/usr/bin/env python3
"""Checks tools/train/model.py against transformers' Qwen3NextForCausalLM: a random model (real config of the
shipped checkpoint, or --tiny), exported with export_hf(), reloaded by transformers, same logits (fp32).

    python3 tools/train/check_model.py --tiny            # CPU, seconds
    python3 tools/train/check_model.py --dir examples/models/hypic-qa-tiny   # the shipped checkpoint
"""
import argparse
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as M  # noqa: E402


def hf_logits(d, ids, device):
    import transformers
    m = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    m = m.to(device).eval()
    with torch.no_grad():
        return m(input_ids=ids, use_cache=False).logits.float()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--dir", default="")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--T", type=int, default=150)
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.dir:
        import json
        c = json.load(open(os.path.join(args.dir, "config.json")))
        m = M.Qwen3Next(c)
        M.load_hf_into(m, os.path.join(args.dir, "model.safetensors"))
        d = args.dir
    else:
        kw = dict(hidden=64, layers=4, interval=2, heads=4, kv_heads=2, head_dim=16, lin_k_heads=2, lin_v_heads=4,
                  lin_k_dim=16, lin_v_dim=8, experts=4, moe_inter=16, shared_inter=32) if args.tiny else {}
        c = M.qwen3_next_config(vocab=100, bos=0, eos=1, **kw)
        m = M.Qwen3Next(c)
        with torch.no_grad():  # spread the norms/gates a bit so every path matters
            for n, p in m.named_parameters():
                if n.endswith("norm.weight") and "linear_attn" not in n:
                    p.normal_(0, 0.2)
                if n.endswith("lm_head.weight"):
                    p.normal_(0, 0.2)
                if n.endswith("embed_tokens.weight"):
                    p.normal_(0, 1.0)
        M.round_to_storage_(m)
        d = tempfile.mkdtemp()
        M.export_hf(m, d)
        # reload check of our own loader
        m2 = M.Qwen3Next(c)
        M.load_hf_into(m2, os.path.join(d, "model.safetensors"))
        for (a, p), (b, q) in zip(m.named_parameters(), m2.named_parameters()):
            assert a == b and torch.equal(p, q), a
    V = c["vocab_size"]
    ids = torch.randint(0, V, (2, args.T), generator=torch.Generator().manual_seed(1)).to(args.device)
    m = m.to(args.device).eval()
    with torch.no_grad():
        ours = m(ids).float()
    ref = hf_logits(d, ids, args.device)
    err = (ours - ref).abs().max().item()
    print(f"max |logit diff| ours vs transformers: {err:.3g} (logit std {ref.std().item():.3g}); "
          f"argmax agree {(ours.argmax(-1) == ref.argmax(-1)).float().mean().item():.4f}")
    assert err < 2e-3 * max(1.0, ref.abs().max().item()), err
    print("OK")


if __name__ == "__main__":
    main()
