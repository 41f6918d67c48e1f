#!/usr/bin/env python3
"""Build the HWU64 retrieval corpus: voice-assistant intents as OAP manifests.

HWU64 (github.com/xliuhw/NLU-Evaluation-Data, CC BY 4.0; Liu et al., IWSDS
2019) holds utterances people wrote for 64 home-assistant intents. This
reads the annotated utterances of its first cross-validation fold's test
set (one file per intent, checked by one sha256 over the files, the same
pin as `train_encoder.py --hwu64`) and writes, like public_corpus.py:

* one manifest per intent outside the "general" scenario (yes, no, repeat,
  a joke: dialogue, not tools). Intents have names, not descriptions: the
  description is the name in words ("smart home: hue lights light off."),
  the parameters the slot types at least two of its utterances fill;
* tasks.jsonl: every utterance, expecting its intent. About 15 % of the
  intents (public_corpus.py's `is_withheld`, by name) are withheld from the
  index and their utterances are the no-fit queries. Every task is in the
  `tuning` split: this corpus is for choosing, never for the final figures.

    git clone https://github.com/xliuhw/NLU-Evaluation-Data HWU && git -C HWU checkout f6071b496b17d71e6eb43f543af0707f4ff30557
    python3 bench/hwu_corpus.py --hwu64 HWU --out target/bench/hwu64
"""
import argparse
import hashlib
import json
import sys
from collections import Counter
from pathlib import Path

from public_corpus import is_withheld, manifest, slugify, write_json
from train_encoder import HWU_DIGEST, HWU_DIR, HWU_GLOSSARY


def words(text):
    """An intent or slot name in words, the glossary's spellings applied."""
    return " ".join(HWU_GLOSSARY.get(w, w) for w in text.split("_"))


def main():
    """CLI entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hwu64", required=True, type=Path, help="NLU-Evaluation-Data clone at the pinned commit")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    files = sorted((args.hwu64 / HWU_DIR).glob("*/*.json"))
    listing = "".join(f"{f.parent.name}/{f.name} {hashlib.sha256(f.read_bytes()).hexdigest()}\n" for f in files)
    digest = hashlib.sha256(listing.encode()).hexdigest()
    if digest != HWU_DIGEST:
        sys.exit(f"{args.hwu64 / HWU_DIR}: digest {digest}, expected {HWU_DIGEST} (wrong commit?)")

    manifest_dir = args.out / "manifests"
    manifest_dir.mkdir(parents=True, exist_ok=True)
    for old in manifest_dir.glob("*.json"):
        old.unlink()
    tasks, withheld, indexed = [], [], 0
    for f in files:
        intent = f.parent.name
        scenario, _, action = intent.partition("_")
        if scenario == "general":
            continue
        rows = next(iter(json.loads(f.read_text()).values()))
        slots = Counter(e["entity"] for r in rows for e in {x["entity"]: x for x in r["entities"]}.values())
        params = {name: {"type": "string", "description": words(name), "required": False}
                  for name, n in slots.most_common(4) if n >= 2}
        hidden = is_withheld(intent)
        if hidden:
            withheld.append(intent)
        else:
            indexed += 1
            stem = f"{slugify(intent)}-{hashlib.sha256(intent.encode()).hexdigest()[:8]}"
            write_json(manifest_dir / f"{stem}.json",
                       manifest(intent, f"{words(scenario)}: {words(action)}.", params, "hwu64"))
        for r in rows:
            tasks.append({"id": f"hwu64-{len(tasks):05d}", "category": intent, "query": r["text"],
                          "expected": [] if hidden else [intent], "negative": hidden, "split": "tuning"})
    with open(args.out / "tasks.jsonl", "w", encoding="utf-8") as out:
        out.writelines(json.dumps(t, ensure_ascii=False) + "\n" for t in tasks)
    no_fit = sum(t["negative"] for t in tasks)
    print(f"HWU64 (digest {digest[:12]}…): {indexed} indexed, {len(withheld)} withheld "
          f"({', '.join(withheld)}); {len(tasks) - no_fit} fitting, {no_fit} no-fit -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
