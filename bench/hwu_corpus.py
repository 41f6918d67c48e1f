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
import json
import sys
from pathlib import Path

from public_corpus import is_withheld, manifest, manifest_stem, write_json
from train_encoder import hwu_words, read_hwu


def main():
    """CLI entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hwu64", required=True, type=Path, help="NLU-Evaluation-Data clone at the pinned commit")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    intents, digest = read_hwu(args.hwu64)
    manifest_dir = args.out / "manifests"
    manifest_dir.mkdir(parents=True, exist_ok=True)
    for old in manifest_dir.glob("*.json"):
        old.unlink()
    tasks, withheld = [], []
    for intent, description, slots, utterances in intents:
        params = {name: {"type": "string", "description": hwu_words(name), "required": False} for name in slots}
        hidden = is_withheld(intent)
        if hidden:
            withheld.append(intent)
        else:
            write_json(manifest_dir / f"{manifest_stem(intent)}.json", manifest(intent, description, params, "hwu64"))
        for text in utterances:
            tasks.append({"id": f"hwu64-{len(tasks):05d}", "category": intent, "query": text,
                          "expected": [] if hidden else [intent], "negative": hidden, "split": "tuning"})
    with open(args.out / "tasks.jsonl", "w", encoding="utf-8") as out:
        out.writelines(json.dumps(t, ensure_ascii=False) + "\n" for t in tasks)
    no_fit = sum(t["negative"] for t in tasks)
    print(f"HWU64 (digest {digest[:12]}…): {len(intents) - len(withheld)} indexed, {len(withheld)} withheld "
          f"({', '.join(withheld)}); {len(tasks) - no_fit} fitting, {no_fit} no-fit -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
