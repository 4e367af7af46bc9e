#!/usr/bin/env python3
"""Trains the tiny Qwen3-Next models of hypic (tools/train/model.py) for a fixed wall-clock budget, then exports
the Hugging Face checkpoint and measures greedy exact match. Recipes (README.md):

    python3 tools/train/train.py --recipe all --out $OUT/train          # long_memory + tool_agent, one GPU
    python3 tools/train/train.py --recipe long_memory --out /tmp/long   # one of them
    python3 tools/train/train.py --tokenizer examples/models/hypic-qa-tiny --out /tmp/run --train-seconds 400  # qa

qa (the shipped hypic-qa-tiny): every sequence is a system block, 1-8 fresh documents (training seeds
>= 1000000) and several question/answer turns (the first exactly as in evaluation, the rest follow-up turns:
more answer tokens per forward); curriculum on the number of documents (max grows from 2 to 8 over the first
--ramp fraction of the run). long_memory: the same shape with task.long_train_sample (single, multihop and
update questions), started from the shipped model grown by long-memory GDN heads (--long-heads).
tool_agent: agent episodes (agent_task.py) in both chat formats, started from the shipped model.
Loss: cross-entropy on answer/reply tokens (+<|im_end|>), plus --lm-weight times the LM loss on the other
tokens. LR: linear warm-up, cosine decay over the time budget.
Outputs in --out: hf/ (config.json, model.safetensors, tokenizer files), ckpt_fp32_*.safetensors (unless
--keep-fp32 0), log.txt, result.json.
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import random
import shutil
import sys
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

import model as M  # noqa: E402
import task  # noqa: E402

IGNORE, LM, ANS = 0, 1, 2
REPLY = 3  # answer tokens whose text already ends with <|im_end|> (tool_agent); trained as ANS


# ----------------------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------------------

class BatchMaker:
    def __init__(self, tok_path: str, batch: int, max_q: int, ramp: float, doc_style: str = "v2", recipe: str = "qa",
                 pic_frac: float = 0.0, variant: str = "facts"):
        self.doc_style, self.recipe, self.pic_frac, self.variant = doc_style, recipe, pic_frac, variant
        self.tok = Tokenizer.from_file(tok_path)
        self.im_end = self.tok.token_to_id("<|im_end|>")
        self.batch, self.max_q, self.ramp = batch, max_q, ramp
        if recipe == "tool_agent":
            import agent_task
            self.agent_task = agent_task
            self.renderers = {f: agent_task.FastRenderer(f) for f in agent_task.FORMATS}

    def sequence(self, rng, progress):
        """(pieces, cached blocks): the sequence's (text, kind) pieces, of which the first `cached blocks`
        are the blocks hypic would cache (0 for agent episodes)."""
        if self.recipe == "tool_agent":  # replies end with <|im_end|> in their text: no extra one (REPLY)
            episode = self.agent_task.train_episode(rng, self.renderers)
            return [(t, REPLY if is_reply else LM) for t, is_reply in episode], 0
        max_docs = min(8, 2 + int(6 * progress / self.ramp)) if self.ramp > 0 else 8
        n_docs = rng.randint(1 if progress < 0.1 else 2, max_docs)
        if self.recipe == "long_memory":
            blocks, turns = task.long_train_sample(rng, max(2, n_docs), rng.randint(1, self.max_q), self.variant)
        else:
            blocks, turns = task.train_sample(rng, n_docs, rng.randint(1, self.max_q), self.doc_style)
        pieces = [(b, IGNORE if i == 0 else LM) for i, b in enumerate(blocks)]
        for j, (tail, ans) in enumerate(turns):
            if j:
                pieces.append((task.FOLLOWUP_HEAD, IGNORE))
            pieces.append((tail, LM))
            pieces.append((ans, ANS))
        return pieces, len(blocks)

    def make(self, rng, progress):
        seqs, blocks = [], []
        for _ in range(self.batch):
            pieces, n_blocks = self.sequence(rng, progress)
            seqs.append(pieces)
            # --pic-frac: this row runs as hypic composes it (model.pic_masks), the others as full recompute;
            # no draw without it, so the data of runs without --pic-frac stay what they were
            pic = self.pic_frac > 0 and n_blocks > 0 and rng.random() < self.pic_frac
            blocks.append(n_blocks if pic else 0)
        flat = [p for s in seqs for p in s]
        enc = self.tok.encode_batch([t for t, _ in flat], add_special_tokens=False)
        ids_l, typ_l, seg_l, k = [], [], [], 0
        for s, nb in zip(seqs, blocks):
            ids, typ, seg = [], [], []
            for j, (_, kind) in enumerate(s):
                e = enc[k].ids
                k += 1
                ids += e
                typ += [ANS if kind == REPLY else kind] * len(e)
                seg += [j if j < nb else -1] * len(e)
                if kind == ANS:
                    ids.append(self.im_end)
                    typ.append(ANS)
                    seg.append(-1)
            ids_l.append(ids)
            typ_l.append(typ)
            seg_l.append(seg)
        T = max(len(x) for x in ids_l)
        T = (T + 63) // 64 * 64
        ids = torch.zeros(self.batch, T, dtype=torch.int64)
        typ = torch.zeros(self.batch, T, dtype=torch.int8)
        seg = torch.full((self.batch, T), -1, dtype=torch.int16)
        for i, (a, b, c) in enumerate(zip(ids_l, typ_l, seg_l)):
            ids[i, : len(a)] = torch.tensor(a)
            typ[i, : len(b)] = torch.tensor(b, dtype=torch.int8)
            seg[i, : len(c)] = torch.tensor(c, dtype=torch.int16)
        return ids, typ, seg


class Stream(torch.utils.data.IterableDataset):
    def __init__(self, tok_path, batch, max_q, ramp, progress, seed, doc_style, recipe, pic_frac=0.0,
                 variant="facts"):
        self.args = (tok_path, batch, max_q, ramp, doc_style, recipe, pic_frac, variant)
        self.progress, self.seed, self.recipe = progress, seed, recipe

    def __iter__(self):
        wi = torch.utils.data.get_worker_info()
        wid = wi.id if wi else 0
        bm = BatchMaker(*self.args)
        rng = random.Random(task.TRAIN_SEED_BASE + self.seed * 1000 + wid + RECIPE_SEED_OFFSET[self.recipe])
        while True:
            yield bm.make(rng, self.progress.value)


# ----------------------------------------------------------------------------------------------------------
# Greedy exact match with our model (full recompute per step, as eval-pic's full mode)
# ----------------------------------------------------------------------------------------------------------

def encode_prompt(tok, blocks):
    return [i for b in blocks for i in tok.encode(b, add_special_tokens=False).ids]


@torch.no_grad()
def block_segments(tok, blocks):
    """model.pic_masks' seg of a prompt: block i's tokens are i, the last block (the query tail) -1."""
    seg = []
    for i, b in enumerate(blocks):
        seg += [i if i < len(blocks) - 1 else -1] * len(tok.encode(b, add_special_tokens=False).ids)
    return seg


def greedy_answers(model, tok, prompts, device, n_new=8, bs=100, autocast=False, pic=False):
    """pic: run the prompts as hypic composes cached blocks (model.pic_masks, no seam) instead of in full."""
    stop = {tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")}
    outs = []
    for s in range(0, len(prompts), bs):
        chunk = [encode_prompt(tok, p["blocks"]) for p in prompts[s: s + bs]]
        L = torch.tensor([len(c) for c in chunk], device=device)
        ids = torch.zeros(len(chunk), int(L.max()) + n_new, dtype=torch.int64, device=device)
        seg = torch.full(ids.shape, -1, dtype=torch.int64, device=device)
        for i, c in enumerate(chunk):
            ids[i, : len(c)] = torch.tensor(c)
            if pic:
                seg[i, : len(c)] = torch.tensor(block_segments(tok, prompts[s + i]["blocks"]))
        gen = []
        for t in range(n_new):
            upto = int(L.max()) + t
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=autocast):
                h = model.hidden(ids[:, :upto], seg[:, :upto] if pic else None)
            pos = L - 1 + t
            logits = model.lm_head(h[torch.arange(len(chunk), device=device), pos].float())
            nxt = logits.float().argmax(-1)
            ids[torch.arange(len(chunk), device=device), L + t] = nxt
            gen.append(nxt)
        gen = torch.stack(gen, 1).tolist()
        for g in gen:
            cut = next((i for i, x in enumerate(g) if x in stop), len(g))
            outs.append((g, tok.decode(g[:cut], skip_special_tokens=False).strip()))
    return outs


def exact_match(model, tok, prompts, device, autocast=False, n_new=8, pic=False):
    outs = greedy_answers(model, tok, prompts, device, autocast=autocast, n_new=n_new, pic=pic)
    return sum(o[1] == p["answer"].strip() for o, p in zip(outs, prompts)) / max(1, len(prompts)), outs


# ----------------------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------------------

def save_ckpt(model, out, log):
    from safetensors.torch import save_file
    sd = {k: v.detach().float().cpu().contiguous() for k, v in model.state_dict().items()}
    keys = sorted(sd, key=lambda k: -sd[k].numel())
    parts = [[], []]  # two files of about equal size: each stays under the device tool's 16 MiB per-file limit
    sizes = [0, 0]
    for k in keys:
        j = 0 if sizes[0] <= sizes[1] else 1
        parts[j].append(k)
        sizes[j] += sd[k].numel()
    for i, ks in enumerate(parts):
        save_file({k: sd[k] for k in ks}, os.path.join(out, f"ckpt_fp32_{i}.safetensors"))
    log(f"checkpoint saved ({sum(v.numel() for v in sd.values())} params)")


def load_ckpt(model, prefix):
    from safetensors.torch import load_file
    sd = {}
    for i in range(2):
        sd.update(load_file(f"{prefix}_{i}.safetensors"))
    model.load_state_dict(sd)


RECIPE_SEED_OFFSET = {"qa": 0, "long_memory": 300, "tool_agent": 600}
SHIPPED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "models", "hypic-qa-tiny")
# Defaults of each recipe (a flag given on the command line wins). Both new recipes start from the shipped QA
# model (it already reads documents and copies answers), which is what makes them fit a few GPU minutes.
RECIPES = {
    "qa": {},
    "long_memory": dict(init_hf=SHIPPED, long_heads=1, lr=2e-3, warmup=50, ramp=0.0, train_seconds=360,
                        batch=128, max_q=6, val_count=240, test_count=600, eval_every=60, hf_check=32,
                        max_new=14, keep_fp32=False),
    "tool_agent": dict(init_hf=SHIPPED, lr=2e-3, warmup=50, train_seconds=360, batch=64, lm_weight=0.1,
                       val_count=100, test_count=200, eval_every=60, max_new=72, hf_check=4, keep_fp32=False),
}


def run_all(args, argv):
    """--recipe all: the two new recipes side by side on the same GPU (a model this small leaves most of
    it idle), each in its own process writing into --out/<recipe>; their logs interleave, prefixed."""
    import subprocess
    import threading
    procs = []
    workers = max(1, min(6, ((os.cpu_count() or 2) - 2) // 2))
    for r in ("long_memory", "tool_agent"):
        rest = [a for a in argv if not a.startswith("--recipe") and a != "all"]
        cmd = [sys.executable, os.path.abspath(__file__), "--recipe", r, "--out", os.path.join(args.out, r),
               "--workers", str(args.workers or workers)] + strip_flags(rest, ["--out", "--workers"])
        print(f"[all] {' '.join(cmd)}", flush=True)
        procs.append((r, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))

    def pump(name, p):
        for line in p.stdout:
            print(f"[{name}] {line}", end="", flush=True)
    threads = [threading.Thread(target=pump, args=rp) for rp in procs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = {r: p.wait() for r, p in procs}
    print(f"[all] exit codes {codes}", flush=True)
    return 0 if all(c == 0 for c in codes.values()) else 1


def strip_flags(argv, names):
    """argv without the given flags (and their values)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in names:
            skip = True
            continue
        if any(a.startswith(n + "=") for n in names):
            continue
        out.append(a)
    return out


@torch.no_grad()
def grow_long_heads(model, add_key_heads: int = 1, seed: int = 0):
    """A copy of a trained model with add_key_heads more key heads (and their value heads) in every Gated
    DeltaNet layer, made long-memory: decay rate A ~ U(1, 4), dt log-uniform in [1e-3, 2e-2] (per-token decay
    0.92..0.999), and out_proj columns zero, so the grown model computes exactly what the trained one did
    and training decides what the new heads carry. The old heads keep their key-head grouping (the new
    heads are appended as whole key-head groups)."""
    c = dict(model.c)
    nk, nv = c["linear_num_key_heads"], c["linear_num_value_heads"]
    r = nv // nk
    c["linear_num_key_heads"], c["linear_num_value_heads"] = nk + add_key_heads, nv + r * add_key_heads
    torch.manual_seed(seed)
    new = M.Qwen3Next(c)
    old_sd, new_sd = model.state_dict(), new.state_dict()
    g = torch.Generator().manual_seed(seed)
    for k, v in new_sd.items():
        o = old_sd[k]
        if o.shape == v.shape:
            v.copy_(o)
            continue
        if k.endswith("in_proj_qkvz.weight") or k.endswith("in_proj_ba.weight"):  # key-head groups appended
            v[: o.shape[0]] = o
        elif k.endswith("conv1d.weight"):  # channels [q | k | v], each by head
            la = new.model.layers[int(k.split(".")[2])].linear_attn
            nkd = la.key_dim
            old_key_dim = nk * la.dk
            v[:old_key_dim] = o[:old_key_dim]
            v[nkd:nkd + old_key_dim] = o[old_key_dim:2 * old_key_dim]
            v[2 * nkd:2 * nkd + nv * la.dv] = o[2 * old_key_dim:]
        elif k.endswith("out_proj.weight"):
            v.zero_()
            v[:, : o.shape[1]] = o
        elif k.endswith("A_log") or k.endswith("dt_bias"):
            v[:nv] = o
            for h in range(nv, v.shape[0]):
                if k.endswith("A_log"):
                    v[h] = torch.log(1 + 3 * torch.rand((), generator=g))
                else:
                    dt = torch.exp(math.log(1e-3) + (math.log(2e-2) - math.log(1e-3)) * torch.rand((), generator=g))
                    v[h] = dt + torch.log(-torch.expm1(-dt))  # inverse softplus
        else:
            raise ValueError(f"cannot grow {k} {tuple(o.shape)} -> {tuple(v.shape)}")
    new.load_state_dict(new_sd)
    return new


def val_sets(recipe, seed, count, variant="facts"):
    """The validation/test prompts of a recipe ({"blocks", "answer", "type"?})."""
    if recipe == "long_memory":
        return list(task.long_eval_prompts(seed, count, variant=variant))
    if recipe == "tool_agent":
        import agent_task
        return [p for f in agent_task.FORMATS for p in agent_task.first_reply_prompts(seed, count // 2, f)]
    return list(task.eval_prompts(seed, count))


def em_by_type(prompts, outs):
    by = {}
    for p, o in zip(prompts, outs):
        k = p.get("type", "all") + ("/" + p["format"] if "format" in p else "")
        n, ok = by.get(k, (0, 0))
        by[k] = (n + 1, ok + (o[1] == p["answer"].strip()))
    return {k: round(ok / n, 4) for k, (n, ok) in sorted(by.items())}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", default="qa", choices=["qa", "long_memory", "tool_agent", "all"],
                    help="qa: the shipped QA model's task (pass --tokenizer); long_memory, tool_agent: the two "
                         "models of README.md, started from the shipped QA model; all: both at once")
    ap.add_argument("--tokenizer", default="", help="dir with tokenizer.json + tokenizer_config.json "
                                                    "(default: --init-hf's)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--train-seconds", type=float, default=400)
    ap.add_argument("--max-steps", type=int, default=10 ** 9)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--lm-weight", type=float, default=0.2)
    ap.add_argument("--max-q", type=int, default=6)
    ap.add_argument("--ramp", type=float, default=0.35)
    ap.add_argument("--workers", type=int, default=0, help="data workers (0: cores - 2, at most 12)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--doc-style", default="v2", choices=["v1", "v2"],
                    help="training documents: v2 one fact per subject (task.py); v1 the first stage's")
    ap.add_argument("--init", default="", help="resume weights: prefix of ckpt_fp32_{0,1}.safetensors")
    ap.add_argument("--init-hf", default="", help="start from an exported model directory (its config and weights)")
    ap.add_argument("--long-heads", type=int, default=0,
                    help="with --init-hf: key heads (with their value heads) added to every GDN layer as "
                         "long-memory heads (grow_long_heads)")
    ap.add_argument("--eval-every", type=float, default=60.0, help="seconds")
    ap.add_argument("--val-seed", type=int, default=99)
    ap.add_argument("--val-count", type=int, default=200)
    ap.add_argument("--test-seed", type=int, default=1)
    ap.add_argument("--test-count", type=int, default=500)
    ap.add_argument("--max-new", type=int, default=8, help="greedy tokens per validation prompt")
    ap.add_argument("--hf-check", type=int, default=64, help="prompts greedy-decoded by transformers at the end")
    ap.add_argument("--pic-frac", type=float, default=0.0,
                    help="share of training rows run as hypic composes cached blocks (isolated blocks, composed "
                         "linear states, model.pic_masks) instead of full recompute: trains the model to answer "
                         "the same from cached blocks")
    ap.add_argument("--gdn-init", default="short", choices=["short", "long"],
                    help="GDN decay init (model.Qwen3Next); the shipped model used short")
    ap.add_argument("--variant", default="facts", choices=task.VARIANTS,
                    help="long_memory's documents (task.py): facts (the first two runs'), moved_homes (the multi-hop "
                         "bridge is itself an update), meeting (a shared slot moved by later documents: the "
                         "shipped hypic-qa-long's)")
    ap.add_argument("--partial-rotary", type=float, default=0.0,
                    help="set the attention's partial_rotary_factor (also of an --init-hf model): 2/64 leaves the "
                         "attention almost no position signal, so block order must come from the linear state")
    ap.add_argument("--cfg", default="{}", help="JSON overrides for model.qwen3_next_config kwargs")
    ap.add_argument("--keep-fp32", type=int, default=1,
                    help="1: keep the fp32 training checkpoint (ckpt_fp32_*) at the end; 0: delete it after the "
                         "export (the device machine brings back < 60 MB)")
    argv = sys.argv[1:]
    args = ap.parse_args(argv)
    if args.recipe == "all":
        sys.exit(run_all(args, argv))
    given = {a.split("=")[0][2:].replace("-", "_") for a in argv if a.startswith("--")}
    for k, v in RECIPES[args.recipe].items():
        if k not in given:
            setattr(args, k, v)
    if not args.workers:
        args.workers = max(1, min(12, (os.cpu_count() or 2) - 2))
    if not args.tokenizer:
        if not args.init_hf:
            ap.error("--tokenizer is required without --init-hf")
        args.tokenizer = args.init_hf

    os.makedirs(args.out, exist_ok=True)
    logf = open(os.path.join(args.out, "log.txt"), "a")

    def log(s):
        line = f"[{time.strftime('%H:%M:%S')}] {s}"
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)
    tok_path = os.path.join(args.tokenizer, "tokenizer.json")
    tok = Tokenizer.from_file(tok_path)
    if args.init_hf:
        with open(os.path.join(args.init_hf, "config.json")) as f:
            cfg = json.load(f)
        model = M.Qwen3Next(cfg)
        M.load_hf_into(model, os.path.join(args.init_hf, "model.safetensors"))
        log(f"started from {args.init_hf}")
        if args.long_heads:
            model = grow_long_heads(model, args.long_heads, args.seed)
            log(f"grown by {args.long_heads} long-memory key head(s) per GDN layer: "
                f"{model.c['linear_num_key_heads']} key / {model.c['linear_num_value_heads']} value heads")
            cfg = model.c
    else:
        cfg = M.qwen3_next_config(vocab=tok.get_vocab_size(with_added_tokens=True),
                                  bos=tok.token_to_id("<|endoftext|>"), eos=tok.token_to_id("<|im_end|>"),
                                  **json.loads(args.cfg))
        model = M.Qwen3Next(cfg, gdn_init=args.gdn_init)
    if args.partial_rotary:
        model.c["partial_rotary_factor"] = args.partial_rotary
        cfg = model.c
        log(f"partial_rotary_factor set to {args.partial_rotary} "
            f"({int(cfg['head_dim'] * args.partial_rotary)} rotary dims of {cfg['head_dim']})")
    if args.init:
        load_ckpt(model, args.init)
        log(f"resumed from {args.init}")
    model = model.to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"device {device} ({torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}), params {n_params}, "
        f"args {vars(args)}")
    log(f"config {json.dumps(cfg)}")

    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if p.dim() >= 2 and not n.endswith("conv1d.weight") else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda")

    progress = mp.Value("d", 0.0, lock=False)
    ds = Stream(tok_path, args.batch, args.max_q, args.ramp, progress, args.seed, args.doc_style, args.recipe,
                args.pic_frac, args.variant)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=args.workers, pin_memory=device.type == "cuda",
                                     prefetch_factor=4 if args.workers else None, persistent_workers=False)
    val = val_sets(args.recipe, args.val_seed, args.val_count, args.variant)
    autocast = device.type == "cuda"

    t0 = time.time()
    last_eval, last_ckpt, step = t0, t0, 0
    acc = {"ans_loss": 0.0, "lm_loss": 0.0, "ans_acc": 0.0, "tok": 0, "n": 0}
    data_wait = 0.0
    it = iter(dl)
    while True:
        el = time.time() - t0
        p = min(1.0, el / args.train_seconds)
        progress.value = p
        if p >= 1.0 or step >= args.max_steps:
            break
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * (
            args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * p)))
        for g in opt.param_groups:
            g["lr"] = lr
        tw = time.time()
        ids, typ, seg = next(it)
        data_wait += time.time() - tw
        ids = ids.to(device, non_blocking=True)
        typ = typ.to(device, non_blocking=True)
        inp, tgt, tt = ids[:, :-1], ids[:, 1:], typ[:, 1:]
        seg = seg[:, :-1].to(device, non_blocking=True).long() if args.pic_frac > 0 else None
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(inp, seg)
        ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tgt.reshape(-1), reduction="none")
        ce = ce.view_as(tgt)
        am, lm = (tt == ANS), (tt == LM)
        ans_loss = (ce * am).sum() / am.sum().clamp(min=1)
        lm_loss = (ce * lm).sum() / lm.sum().clamp(min=1)
        loss = ans_loss + args.lm_weight * lm_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        with torch.no_grad():
            pred_ok = (logits.argmax(-1) == tgt) & am
            acc["ans_loss"] += ans_loss.detach()
            acc["lm_loss"] += lm_loss.detach()
            acc["ans_acc"] += pred_ok.sum() / am.sum().clamp(min=1)
            acc["tok"] += ids.numel()
            acc["n"] += 1
        if step % 50 == 0 or step == 5:
            n = acc["n"]
            el = time.time() - t0
            log(f"step {step} t={el:.0f}s p={p:.2f} lr={lr:.2e} T={ids.shape[1]} ans_loss={float(acc['ans_loss']) / n:.3f} "
                f"ans_tok_acc={float(acc['ans_acc']) / n:.3f} lm_loss={float(acc['lm_loss']) / n:.3f} gn={float(gn):.2f} "
                f"tok/s={acc['tok'] / max(1e-9, el):.0f} steps/s={step / max(1e-9, el):.2f} data_wait={data_wait:.1f}s")
            acc = {"ans_loss": 0.0, "lm_loss": 0.0, "ans_acc": 0.0, "tok": acc["tok"], "n": 0}
        now = time.time()
        if now - last_eval > args.eval_every:
            model.eval()
            em, outs = exact_match(model, tok, val, device, autocast=autocast, n_new=args.max_new)
            model.train()
            log(f"step {step} t={now - t0:.0f}s val EM (seed {args.val_seed}, {len(val)} prompts, bf16) = {em:.3f} "
                f"{em_by_type(val, outs)}")
            if args.pic_frac > 0:
                model.eval()
                em, outs = exact_match(model, tok, val, device, autocast=autocast, n_new=args.max_new, pic=True)
                model.train()
                log(f"step {step} val EM composed as hypic (no seam) = {em:.3f} {em_by_type(val, outs)}")
            last_eval = time.time()
        if now - last_ckpt > 90:
            save_ckpt(model, args.out, log)
            last_ckpt = time.time()

    log(f"training done: {step} steps in {time.time() - t0:.0f}s")
    save_ckpt(model, args.out, log)
    del it, dl

    # Export: round the stored-bf16 tensors, write the HF dir.
    model.eval()
    model = model.float()
    M.round_to_storage_(model)
    hf = os.path.join(args.out, "hf")
    M.export_hf(model, hf)
    for f in ["tokenizer.json", "tokenizer_config.json"]:
        shutil.copy(os.path.join(args.tokenizer, f), os.path.join(hf, f))
    result = {"steps": step, "train_seconds": args.train_seconds, "params": n_params, "args": vars(args)}
    for name, seed, count in [("val", args.val_seed, args.val_count), ("test", args.test_seed, args.test_count)]:
        prompts = val_sets(args.recipe, seed, count, args.variant)
        em, outs = exact_match(model, tok, prompts, device, autocast=False, n_new=args.max_new)
        result[f"em_{name}_seed{seed}_fp32"] = em
        result[f"em_{name}_seed{seed}_by_type"] = em_by_type(prompts, outs)
        log(f"final EM {name} seed {seed} ({count} prompts, fp32, exported weights) = {em:.4f} "
            f"{em_by_type(prompts, outs)}")
        if args.pic_frac > 0:
            em_p, outs_p = exact_match(model, tok, prompts, device, autocast=False, n_new=args.max_new, pic=True)
            result[f"em_{name}_seed{seed}_fp32_composed"] = em_p
            result[f"em_{name}_seed{seed}_by_type_composed"] = em_by_type(prompts, outs_p)
            log(f"final EM {name} seed {seed} composed as hypic (no seam) = {em_p:.4f} {em_by_type(prompts, outs_p)}")
        if name == "test":
            wrong = [(p["answer"], o[1]) for o, p in zip(outs, prompts) if o[1] != p["answer"].strip()][:10]
            log(f"some misses (answer, got): {wrong}")
            test_prompts, test_outs = prompts, outs

    # transformers: same logits and same greedy answers on the exported checkpoint.
    if args.hf_check:
        try:
            import transformers
            hm = transformers.AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32,
                                                                   attn_implementation="eager").to(device).eval()
            agree, maxdiff = 0, 0.0
            for p, o in zip(test_prompts[: args.hf_check], test_outs[: args.hf_check]):
                ids = encode_prompt(tok, p["blocks"])
                seq = list(ids)
                for t in range(len(o[0])):
                    with torch.no_grad():
                        lg = hm(input_ids=torch.tensor([seq], device=device), use_cache=False).logits[0, -1].float()
                        if t == 0:
                            mine = model(torch.tensor([seq], device=device))[0, -1].float()
                            maxdiff = max(maxdiff, (lg - mine).abs().max().item())
                    nxt = int(lg.argmax())
                    seq.append(nxt)
                    if nxt in (tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")):
                        break
                gen = seq[len(ids):]
                agree += gen == o[0][: len(gen)]
            result["hf_greedy_agree"] = agree / args.hf_check
            result["hf_first_logits_maxdiff"] = maxdiff
            log(f"transformers {transformers.__version__}: greedy agree {agree}/{args.hf_check}, "
                f"first-token logits max|diff| {maxdiff:.3g}")
        except Exception as e:  # keep the checkpoint even if this check breaks
            log(f"transformers check failed: {e!r}")
            result["hf_check_error"] = repr(e)
    with open(os.path.join(args.out, "result.json"), "w") as f:
        json.dump(result, f, indent=2)
    if not args.keep_fp32:
        for i in range(2):
            os.remove(os.path.join(args.out, f"ckpt_fp32_{i}.safetensors"))
        log("fp32 training checkpoint deleted (--keep-fp32 0)")
    log(f"done in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
