#!/usr/bin/env python3
"""Fine-tune all-MiniLM-L6-v2 for tool retrieval with a low-rank (LoRA) update.

Training data: request -> tool pairs from two public, Apache-2.0 datasets,
read from git clones at pinned commits and checked file by file (sha256):

* Seal-Tools (github.com/fairyshine/Seal-Tools): 4,076 tool descriptions
  with their parameters and the requests of its dev and test splits that
  call 1-6 tools (2,054 requests; its train split is not in the repository).
* ToolAlpaca (github.com/tangqiaoyu/ToolAlpaca): the functions of its
  evaluation APIs and their instructions (209 requests).

`--hwu64 CLONE` adds HWU64's voice-assistant utterances (NLU-Evaluation-Data
at a pinned commit, CC BY 4.0) as requests of its intents; tried and not
adopted, so the shipped factors are made without it.

None of the project's benchmark corpora is read: the shared task set, BFCL,
and both halves of ha-intents and NESTFUL stay checks. A tenth of the
training tools (by a hash of the tool key) is held out; its requests are the
validation line printed after each epoch.

A tool document is the text the daemon embeds for a manifest's description
row: the description, then " Inputs: " and each parameter as "humanized
name (its description)", joined by "; " (oap-discovery's document.rs).

Loss: softmax over the batch's documents at temperature 0.05, both
directions; a query's other expected tools in the batch are masked out
instead of counted as negatives. Plus a drift penalty (weight 20): for the
batch's request/tool pairs that do not belong together, the mean amount by
which the tuned cosine rises above the base model's. Without it the
training lifts every request's cosine to every tool, so a request that no
tool fits scores as high as a fitting one and "nothing fits" is judged
worse; with it, unrelated pairs keep the base model's cosines while a
request's own tool gains on its near neighbours. LoRA of rank 16 (alpha 32) on every linear
layer of the six encoder layers (663,552 parameters); AdamW, learning rate
3e-4 with a 10 % warm-up and linear decay, batch 32, 3 epochs, random state 7, two
CPU threads (about 7 minutes on two cores).

Writes OUT/model.safetensors (the merged weights: every other tensor is the
base model's, byte for byte), config.json, tokenizer.json and the licence
files, so that `oap-bench retrieval --model OUT` ranks with it, and
OUT/lora.safetensors (f16 A and B*scale per layer).

    git clone https://github.com/fairyshine/Seal-Tools SEAL && git -C SEAL checkout ce753ecd60ed08dd376984035de531ab8421f1c6
    git clone https://github.com/tangqiaoyu/ToolAlpaca ALPACA && git -C ALPACA checkout 189069998d64a7baf1b4a1c3c4b2e75eb9d05532
    pip install torch==2.5.1 transformers==4.46.3 tokenizers==0.20.3 safetensors==0.8.0
    python3 bench/train_encoder.py --seal-tools SEAL --toolalpaca ALPACA --out target/bench/minilm-tools
"""
import argparse
import ast
import hashlib
import json
import math
import os
import random
import re
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

SEAL_FILES = {
    "Seal-Tools_Dataset/tool.jsonl": "35e34aaec1f0793c2b5a5dff734cb925837988f59ed0fe4f410d67f3d8375f5c",
    "Seal-Tools_Dataset/dev.jsonl": "53da12c9fab27e47eba4767ae3625b53bb6474215c38e5033b1fe11e84efacf6",
    "Seal-Tools_Dataset/test_in_domain.jsonl": "330020288948e711846417c2fca9a5980ef0f1adc01ad74dc38cc9ff7142811f",
    "Seal-Tools_Dataset/test_out_domain.jsonl": "c2a86a3d3a5270f578e07f39a0973310cbcaec3b8d72166d7be38d21c9720be6",
}
ALPACA_FILES = {
    "data/eval_real.json": "86d1392c786060e00dd6feaa963d8a87660e3042380b0abbd8ccad2b931e2778",
    "data/eval_simulated.json": "17085ffefae0a0e15c1d2d564263063932d692011edf27ce8ae3d3803432ba08",
}
VERSIONS = {"torch": "2.5.1", "transformers": "4.46.3", "tokenizers": "0.20.3", "safetensors": "0.8.0"}
MAX_TOOLS_PER_REQUEST = 6
# HWU64 (github.com/xliuhw/NLU-Evaluation-Data, CC BY 4.0) at this commit:
# the annotated utterances of its first cross-validation fold's test set, one
# file per intent. Its intents have names, not descriptions: a tool document
# is the intent's name in words (the glossary below spells out its compound
# and abbreviated tokens) and the slot types most of its utterances fill.
# The "general" scenario (yes, no, repeat, a joke) is dialogue, not a tool.
HWU_COMMIT = "f6071b496b17d71e6eb43f543af0707f4ff30557"
HWU_DIR = "CrossValidation/autoGeneFromRealAnno/autoGene_2018_03_22-13_01_25_169/CrossValidation/KFold_1/testset/annotated"
# sha256 over the sorted "intent/file sha256" lines of the intent files
HWU_DIGEST = "7fad61698aa1b52f7f63f4ecaa558574003799c10d057aa93b0458192d89f6ac"
HWU_GLOSSARY = {
    "iot": "smart home", "hue": "hue lights", "wemo": "wemo smart plug", "qa": "question",
    "lightoff": "light off", "lighton": "light on", "lightdim": "light dim", "lightup": "light up",
    "lightchange": "light change", "addcontact": "add contact", "querycontact": "query contact",
    "sendemail": "send email", "createoradd": "create or add", "timeofday": "time of day",
}


def read_pinned(root, rel, sha):
    data = (Path(root) / rel).read_bytes()
    got = hashlib.sha256(data).hexdigest()
    if got != sha:
        sys.exit(f"{root}/{rel}: sha256 {got}, expected {sha} (wrong commit?)")
    return data.decode()


def humanize(name):
    s = re.sub(r"[_\.\-/#]+", " ", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", s)
    return " ".join(w.lower() for w in s.split() if not w.isdigit())


def description_row(desc, params):
    row = desc.strip()
    if params:
        inputs = []
        for name, text in params:
            text = (text or "").strip()
            inputs.append(f"{humanize(name)} ({text})" if text else humanize(name))
        row += " Inputs: " + "; ".join(inputs) + "."
    return row


def hwu_words(name):
    """An HWU64 intent or slot name in words, the glossary's spellings applied."""
    return " ".join(HWU_GLOSSARY.get(w, w) for w in name.split("_"))


def read_hwu(root):
    """HWU64's intents outside the "general" scenario, checked against
    HWU_DIGEST: (intent, description, slot names, utterances) each, and the
    digest."""
    folder = Path(root) / HWU_DIR
    files = sorted(folder.glob("*/*.json"))
    if not files:
        sys.exit(f"{folder}: no intent files (is {root} a clone of NLU-Evaluation-Data?)")
    listing = "".join(f"{f.parent.name}/{f.name} {hashlib.sha256(f.read_bytes()).hexdigest()}\n" for f in files)
    digest = hashlib.sha256(listing.encode()).hexdigest()
    if digest != HWU_DIGEST:
        sys.exit(f"{folder}: digest {digest}, expected {HWU_DIGEST} (not commit {HWU_COMMIT}?)")
    intents = []
    for f in files:
        intent = f.parent.name
        scenario, _, action = intent.partition("_")
        if scenario == "general":
            continue
        rows = next(iter(json.loads(f.read_text()).values()))
        # Slot types counted once per utterance; those at least two fill.
        slots = Counter(e["entity"] for r in rows for e in {x["entity"]: x for x in r["entities"]}.values())
        intents.append((intent, f"{hwu_words(scenario)}: {hwu_words(action)}.",
                        [name for name, n in slots.most_common(4) if n >= 2], [r["text"] for r in rows]))
    return intents, digest


def hwu_pairs(root, per_intent=None):
    """HWU64's intents as tools and its utterances as their requests."""
    intents, digest = read_hwu(root)
    docs, pairs = {}, []
    for intent, description, slots, utterances in intents:
        docs["hwu:" + intent] = description_row(description, [(hwu_words(name), "") for name in slots])
        for text in utterances[:per_intent]:
            pairs.append({"query": text, "tools": ["hwu:" + intent], "source": "hwu64"})
    return docs, pairs, digest


def build_pairs(seal_root, alpaca_root):
    docs, pairs = {}, []
    for line in read_pinned(seal_root, "Seal-Tools_Dataset/tool.jsonl", SEAL_FILES["Seal-Tools_Dataset/tool.jsonl"]).splitlines():
        tool = json.loads(line)
        params = [(k, (v or {}).get("description", "")) for k, v in (tool.get("parameters") or {}).items()]
        docs["seal:" + tool["api_name"]] = description_row(tool["api_description"], params)
    for split in ["dev", "test_in_domain", "test_out_domain"]:
        rel = f"Seal-Tools_Dataset/{split}.jsonl"
        for line in read_pinned(seal_root, rel, SEAL_FILES[rel]).splitlines():
            request = json.loads(line)
            apis = sorted({c["api"] for c in request["calling"]})
            apis = ["seal:" + a for a in apis if "seal:" + a in docs]
            if 1 <= len(apis) <= MAX_TOOLS_PER_REQUEST:
                pairs.append({"query": request["query"], "tools": apis, "source": "seal"})
    for rel in ["data/eval_real.json", "data/eval_simulated.json"]:
        for api in json.loads(read_pinned(alpaca_root, rel, ALPACA_FILES[rel])):
            functions = api["Function_Description"]
            functions = ast.literal_eval(functions) if isinstance(functions, str) else functions
            for fname, text in functions.items():
                first = text.split("\nParameters:")[0].strip()
                params = []
                m = re.search(r"Parameters: (\{.*?\})\n", text + "\n", re.S)
                if m:
                    try:
                        params = [(k, v if isinstance(v, str) else "") for k, v in json.loads(m.group(1)).items()]
                    except ValueError:
                        pass
                docs[f"alpaca:{api['Name']}:{fname}"] = description_row(first, params)
            instructions = api["Instructions"]
            instructions = ast.literal_eval(instructions) if isinstance(instructions, str) else instructions
            gold = api["Golden_Answers"]
            gold = ast.literal_eval(gold) if isinstance(gold, str) else gold
            for query, answer in zip(instructions, gold):
                keys = sorted({f"alpaca:{api['Name']}:{a['Action']}" for a in answer} & set(docs))
                if 1 <= len(keys) <= MAX_TOOLS_PER_REQUEST:
                    pairs.append({"query": query, "tools": keys, "source": "alpaca"})
    return docs, pairs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seal-tools", required=True, help="Seal-Tools clone at the pinned commit")
    ap.add_argument("--toolalpaca", required=True, help="ToolAlpaca clone at the pinned commit")
    ap.add_argument("--hwu64", help="NLU-Evaluation-Data clone at the pinned commit (voice-assistant intents)")
    ap.add_argument("--hwu64-per-intent", type=int, help="at most this many utterances per HWU64 intent (the first in its file)")
    ap.add_argument("--base", default="models/all-MiniLM-L6-v2")
    ap.add_argument("--out", required=True)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--temp", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--holdout", type=float, default=0.1)
    ap.add_argument("--drift-weight", type=float, default=20.0, help="penalty on a non-pair's cosine rising above the base model's")
    a = ap.parse_args()

    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import tokenizers
    import safetensors
    import transformers
    from safetensors.torch import load_file, save_file
    from tokenizers import Tokenizer
    from transformers import BertConfig, BertModel

    for module in (torch, transformers, tokenizers, safetensors):
        want = VERSIONS[module.__name__]
        if not module.__version__.startswith(want):
            print(f"warning: {module.__name__} {module.__version__}, the figures were made with {want}", file=sys.stderr)

    docs, pairs = build_pairs(a.seal_tools, a.toolalpaca)
    if a.hwu64:
        hwu_docs, more, digest = hwu_pairs(a.hwu64, a.hwu64_per_intent)
        print("HWU64 intent files digest", digest)
        docs.update(hwu_docs)
        pairs += more
    print(len(docs), "tools,", len(pairs), "requests", dict(Counter(p["source"] for p in pairs)))

    torch.manual_seed(a.seed)
    random.seed(a.seed)
    torch.set_num_threads(2)
    cfg = BertConfig.from_json_file(os.path.join(a.base, "config.json"))
    model = BertModel(cfg, add_pooling_layer=True)
    base = load_file(os.path.join(a.base, "model.safetensors"))
    missing, _ = model.load_state_dict(base, strict=False)
    if [m for m in missing if "position_ids" not in m]:
        sys.exit(f"base model lacks {missing}")
    tok = Tokenizer.from_file(os.path.join(a.base, "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()

    class LoRA(nn.Module):
        def __init__(self, linear, r, alpha):
            super().__init__()
            self.base = linear
            self.A = nn.Parameter(torch.randn(r, linear.in_features) / math.sqrt(linear.in_features))
            self.B = nn.Parameter(torch.zeros(linear.out_features, r))
            self.scale = alpha / r

        def forward(self, x):
            return self.base(x) + (x @ self.A.t() @ self.B.t()) * self.scale

    for p in model.parameters():
        p.requires_grad_(False)
    targets = ["query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense"]
    lora_names = []
    for name, mod in list(model.named_modules()):
        for t in targets:
            if name.startswith("encoder.layer.") and name.endswith("." + t) and isinstance(mod, nn.Linear):
                if t == "output.dense" and name.endswith("attention.output.dense"):
                    continue
                parent, child = name.rsplit(".", 1)
                setattr(model.get_submodule(parent), child, LoRA(mod, a.rank, a.alpha))
                lora_names.append(name)
    params = [p for p in model.parameters() if p.requires_grad]
    print(f"LoRA on {len(lora_names)} linear layers, {sum(p.numel() for p in params)} parameters")

    def encode(texts, max_len):
        encs = tok.encode_batch(texts)
        length = min(max_len, max(len(e.ids) for e in encs))
        ids = torch.zeros(len(texts), length, dtype=torch.long)
        mask = torch.zeros(len(texts), length, dtype=torch.long)
        for i, e in enumerate(encs):
            x = e.ids[:length]
            if len(e.ids) > length:
                x = e.ids[:length - 1] + [e.ids[-1]]
            ids[i, :len(x)] = torch.tensor(x)
            mask[i, :len(x)] = 1
        out = model(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)).last_hidden_state
        m = mask.unsqueeze(-1).float()
        return F.normalize((out * m).sum(1) / m.sum(1).clamp(min=1), dim=-1)

    def share(key):
        return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 2**32

    held = {t for t in docs if share(t) < a.holdout}
    train = [p for p in pairs if not any(t in held for t in p["tools"])]
    val = [p for p in pairs if all(t in held for t in p["tools"])]
    print(f"train {len(train)} requests, validation {len(val)} requests over {len(held)} held-out tools")
    keys = list(docs)

    # The base model's vectors (LoRA's B starts at zero, so the model is the
    # base model now): the drift penalty keeps non-pairs' cosines from rising
    # above them, which is what "nothing fits" is judged by.
    with torch.no_grad():
        model.eval()
        base_doc = {}
        for i in range(0, len(keys), 128):
            for k, v in zip(keys[i:i + 128], encode([docs[k] for k in keys[i:i + 128]], 128)):
                base_doc[k] = v
        base_query = {}
        qs = sorted({p["query"] for p in pairs})
        for i in range(0, len(qs), 128):
            for k, v in zip(qs[i:i + 128], encode(qs[i:i + 128], 64)):
                base_query[k] = v
        model.train()

    @torch.no_grad()
    def validate():
        model.eval()
        D = torch.cat([encode([docs[k] for k in keys[i:i + 128]], 128) for i in range(0, len(keys), 128)])
        Q = torch.cat([encode([p["query"] for p in val[i:i + 128]], 64) for i in range(0, len(val), 128)])
        S = Q @ D.t()
        r1 = r3 = mrr = 0.0
        for i, p in enumerate(val):
            ranked = [keys[j] for j in S[i].argsort(descending=True)[:50].tolist()]
            pos = [ranked.index(t) for t in p["tools"] if t in ranked]
            best = min(pos) if pos else 999
            r1 += best < 1
            r3 += best < 3
            mrr += 1 / (best + 1) if pos else 0
        model.train()
        n = max(1, len(val))
        own = torch.zeros_like(S, dtype=torch.bool)
        for i, p in enumerate(val):
            for t in p["tools"]:
                own[i, keys.index(t)] = True
        Sb = torch.stack([base_query[p["query"]] for p in val]) @ torch.stack([base_doc[k] for k in keys]).t()
        top_t = S.masked_fill(own, -1).max(1).values
        top_b = Sb.masked_fill(own, -1).max(1).values
        fit_t = S.masked_fill(~own, -1).max(1).values
        fit_b = Sb.masked_fill(~own, -1).max(1).values
        return (f"R@1 {r1 / n:.3f} R@3 {r3 / n:.3f} MRR {mrr / n:.3f}; own cosine {fit_b.mean():.3f} -> {fit_t.mean():.3f},"
                f" best other {top_b.mean():.3f} -> {top_t.mean():.3f}")

    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.01)
    steps_per_epoch = math.ceil(len(train) / a.batch)
    total = steps_per_epoch * a.epochs
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, total // 10)) * max(0.0, (total - s) / total))
    print("validation before:", validate())
    model.train()
    for epoch in range(a.epochs):
        random.shuffle(train)
        started, loss_sum = time.time(), 0.0
        for b in range(0, len(train), a.batch):
            batch = train[b:b + a.batch]
            chosen = [random.choice(p["tools"]) for p in batch]
            q = encode([p["query"] for p in batch], 64)
            d = encode([docs[t] for t in chosen], 128)
            logits = q @ d.t() / a.temp
            other_positive = torch.tensor([[i != j and chosen[j] in batch[i]["tools"] for j in range(len(batch))]
                                           for i in range(len(batch))])
            logits = logits.masked_fill(other_positive, -1e4)
            labels = torch.arange(len(batch))
            loss = (F.cross_entropy(logits, labels)
                    + F.cross_entropy(logits.t().masked_fill(other_positive.t(), -1e4), labels)) / 2
            base_cos = torch.stack([base_query[p["query"]] for p in batch]) @ torch.stack([base_doc[t] for t in chosen]).t()
            positive = other_positive | torch.eye(len(batch), dtype=torch.bool)
            drift = (q @ d.t() - base_cos).clamp(min=0).masked_fill(positive, 0)
            loss = loss + a.drift_weight * drift.sum() / (~positive).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            loss_sum += loss.item()
        print(f"epoch {epoch}: loss {loss_sum / steps_per_epoch:.4f}, {time.time() - started:.0f} s, validation:",
              validate(), flush=True)

    model.eval()
    merged = {k: v.clone() for k, v in base.items()}
    lora = {}
    for name in lora_names:
        m = model.get_submodule(name)
        merged[name + ".weight"] = (base[name + ".weight"] + (m.B @ m.A) * m.scale).detach().contiguous()
        lora[name + ".lora_A"] = m.A.detach().half().contiguous()
        lora[name + ".lora_B"] = (m.B * m.scale).detach().half().contiguous()
    os.makedirs(a.out, exist_ok=True)
    save_file({k: v.contiguous() for k, v in merged.items()}, os.path.join(a.out, "model.safetensors"))
    save_file(lora, os.path.join(a.out, "lora.safetensors"))
    for f in ["config.json", "tokenizer.json", "LICENSE", "NOTICE"]:
        if os.path.exists(os.path.join(a.base, f)):
            shutil.copy(os.path.join(a.base, f), a.out)
    digest = hashlib.sha256(Path(a.out, "lora.safetensors").read_bytes()).hexdigest()
    print(f"wrote {a.out} (lora.safetensors sha256 {digest})")


if __name__ == "__main__":
    main()
