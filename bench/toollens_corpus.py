#!/usr/bin/env python3
"""Build the ToolLens retrieval corpus: ToolBench endpoints and requests that need several.

ToolLens (Qu et al., "Towards Completeness-Oriented Tool Retrieval for Large
Language Models", CIKM 2024; github.com/quchangle1/COLT) pairs 464 RapidAPI
endpoints from ToolBench with short requests that need two or three of them
("I'm planning a meal using the ingredient beef and grocery."). This reads
its corpus, queries and the qrels of its test split from a clone at a pinned
commit (each file checked by sha256; the repository is not on a package
registry and carries no licence file, so its data is read from the clone and
never copied into this one) and writes, like public_corpus.py:

* one manifest per endpoint: the name "<tool>: <endpoint>", the description
  the endpoint's own, after the tool's name; the parameters its required and
  optional parameters;
* tasks.jsonl: every test request, expecting every endpoint its qrels list.
  About 15 % of the endpoints (public_corpus.py's ``is_withheld``, by name)
  are withheld from the index: a request all of whose endpoints are withheld
  is a no-fit query, one mixing withheld and indexed endpoints is dropped.
  Each request takes the half (``tuning`` or ``evaluation``, public_corpus.py's
  ``split_of``) of its first endpoint by name.

    git clone https://github.com/quchangle1/COLT COLT && git -C COLT checkout bbec292c38cabe3fbae098f50cc31b2e9f7e8fca
    python3 bench/toollens_corpus.py --colt COLT --out target/bench/toollens
"""
import argparse
import csv
import io
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

from public_corpus import is_withheld, manifest, manifest_stem, split_of, write_json
from train_encoder import read_pinned

COMMIT = "bbec292c38cabe3fbae098f50cc31b2e9f7e8fca"
FILES = {
    "datasets/ToolLens/corpus.jsonl": "6e3c28dedd464e6dce86a0643f88277083eca3cf76570fc5acbf76afd4f15c42",
    "datasets/ToolLens/queries.jsonl": "4674a388d5e00f05814dce4c9f9cfb537b514b05e1bb1ec4ac1d1c7a02c22376",
    "datasets/ToolLens/qrels/test.tsv": "ec1a7fe340747480ca1e54740ed304802cb7f6901cfdde74e58f8d379c22756f",
}
# One endpoint, as ToolLens's corpus writes it.
ENDPOINT = re.compile(
    r"^category_name:(?P<category>.*?), tool_name:(?P<tool>.*?), api_name:(?P<api>.*?), "
    r"api_description:(?P<description>.*?), required_params: (?P<required>\[.*?\]), "
    r"optional_params: (?P<optional>\[.*?\]), return_schema: .*$", re.S)
TYPES = {"STRING": "string", "NUMBER": "number", "BOOLEAN": "boolean", "ENUM": "string",
         "DATE (YYYY-MM-DD)": "string", "TIME (24-hour HH:MM)": "string", "ARRAY": "array",
         "OBJECT": "object", "GEOPOINT (latitude, longitude)": "string"}


def parameters(required, optional, unknown):
    """OAP parameters from ToolBench's required and optional parameter lists."""
    params = {}
    for entries, is_required in ((required, True), (optional, False)):
        for p in entries:
            name = str(p.get("name", "")).strip()
            if not name or name in params:
                continue
            raw = str(p.get("type", "STRING")).upper()
            if raw not in TYPES:
                unknown[raw] += 1
            params[name] = {"type": TYPES.get(raw, "string"),
                            "description": str(p.get("description") or ""), "required": is_required}
    return params


def endpoints(text, unknown):
    """{corpus id: (manifest name, description, parameters)}."""
    out = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        doc = json.loads(line)
        m = ENDPOINT.match(doc["text"])
        if not m:
            sys.exit(f"corpus id {doc['_id']}: not the ToolLens endpoint format")
        name = f"{m['tool'].strip()}: {m['api'].strip()}"
        description = f"{m['tool'].strip()}: {m['description'].strip()}"
        params = parameters(json.loads(m["required"]), json.loads(m["optional"]), unknown)
        out[doc["_id"]] = (name, description, params)
    return out


def main():
    """CLI entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--colt", required=True, type=Path, help="COLT clone at the pinned commit")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()

    def read(name):
        """A ToolLens file of the clone, refused unless its sha256 is the pinned one."""
        rel = f"datasets/ToolLens/{name}"
        return read_pinned(args.colt, rel, FILES[rel])

    unknown = Counter()
    tools = endpoints(read("corpus.jsonl"), unknown)
    if len({name for name, _, _ in tools.values()}) != len(tools):
        sys.exit("two endpoints share a name")
    queries = {}
    for line in read("queries.jsonl").splitlines():
        if line.strip():
            q = json.loads(line)
            queries[q["_id"]] = q["text"].strip()
    wanted = defaultdict(list)
    qrels = csv.DictReader(io.StringIO(read("qrels/test.tsv")),
                           delimiter="\t")
    for row in qrels:
        if int(row["score"]) > 0 and row["corpus-id"] not in wanted[row["query-id"]]:
            wanted[row["query-id"]].append(row["corpus-id"])

    manifest_dir = args.out / "manifests"
    manifest_dir.mkdir(parents=True, exist_ok=True)
    for old in manifest_dir.glob("*.json"):
        old.unlink()
    withheld = {cid for cid, (name, _, _) in tools.items() if is_withheld(name)}
    for cid, (name, description, params) in tools.items():
        if cid not in withheld:
            write_json(manifest_dir / f"{manifest_stem(name)}.json",
                       manifest(name, description, params, "toollens"))
    tasks, dropped = [], Counter()
    for qid, cids in wanted.items():
        if qid not in queries or any(c not in tools for c in cids):
            dropped["unknown query or endpoint"] += 1
            continue
        hidden = [c in withheld for c in cids]
        if any(hidden) and not all(hidden):
            dropped["withheld and indexed endpoints mixed"] += 1
            continue
        names = [tools[c][0] for c in cids]
        tasks.append({"id": f"toollens-{qid}", "category": names[0], "query": queries[qid],
                      "expected": [] if all(hidden) else names, "negative": all(hidden),
                      "split": split_of(names[0])})
    tasks.sort(key=lambda t: t["id"])
    with open(args.out / "tasks.jsonl", "w", encoding="utf-8") as out:
        out.writelines(json.dumps(t, ensure_ascii=False) + "\n" for t in tasks)
    counts = Counter((t["split"], "no-fit" if t["negative"] else "fitting") for t in tasks)
    print(f"ToolLens ({COMMIT[:7]}): {len(tools) - len(withheld)} endpoints indexed, "
          f"{len(withheld)} withheld; " + ", ".join(f"{s} {k} {n}" for (s, k), n in sorted(counts.items()))
          + f"; dropped {dict(dropped)}; parameter types read as string {dict(unknown)} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
