#!/usr/bin/env python3
"""Build the "nothing fits" corpus of small catalogs from BFCL's relevance data.

Each BFCL entry comes with its own list of functions. For ``simple_python``
and ``live_simple`` one of them is the function the request calls (the
request fits its catalog); for ``irrelevance`` and ``live_irrelevance`` none
of them fits (the right answer is "nothing fits"). Unlike the held-out
corpora of bench/public_corpus.py, whose no-fit requests were written for a
withheld intent whose siblings stay indexed, these catalogs hold other tools,
and they are small (one to a few dozen functions): the small end of the
"a 13-tool catalog and a 10k-manifest catalog behave alike" requirement.

Read from the bfcl-eval wheel pinned in bench/requirements-bfcl.txt (fetched
into ``DIR/.cache`` with ``pip download --require-hashes`` and read as a zip
file, never installed), written as:

- ``DIR/catalogs/<entry>/<function>.json``: one OAP manifest per function of
  an entry, described as bench/bfcl_corpus.py describes BFCL functions;
- ``DIR/tasks.jsonl``: ``id``, ``query`` (the first turn's user messages),
  ``catalog`` (the entry's directory name), ``expected`` (the called
  function's manifest name; empty when nothing fits), ``category``, and
  ``split`` (``tuning`` or ``evaluation``, half each by a hash of the entry
  id with the salt of the other held-out corpora);
- ``DIR/STATS.json``.

Run by ``cargo xtask bench-relevance`` (then ``oap-bench relevance``).
Standard library only.
"""
import json
import shutil
import sys
import zipfile
from collections import Counter

from bfcl_corpus import build_manifest, canonical, pinned_wheel_args, read_jsonl, slugify, write_json
from public_corpus import bucket

FITTING = ("simple_python", "live_simple")
NO_FIT = ("irrelevance", "live_irrelevance")


def member(zf, category, answers=False):
    """The wheel path of a category's questions (or possible answers)."""
    path = f"bfcl_eval/data/{'possible_answer/' if answers else ''}BFCL_v4_{category}.json"
    if path not in set(zf.namelist()):
        sys.exit(f"wheel lacks {path}")
    return path


def split_of(entry_id):
    """``tuning`` or ``evaluation``, half each, from the entry id alone."""
    return "tuning" if bucket(entry_id, "split") < 0.5 else "evaluation"


def query_of(entry):
    """The first turn's user messages, as the BFCL retrieval corpus reads them."""
    turn = entry["question"][0] if entry.get("question") else []
    return "\n".join(m["content"] for m in turn if m.get("role") == "user").strip()


def catalog_of(entry, unknown_types):
    """{function name: (manifest name, file stem, manifest)} for an entry's functions.

    Exact duplicates are listed once; a name with several different bodies
    gets ``name#k`` as bench/bfcl_corpus.py does.
    """
    bodies = {}
    for func in entry.get("function") or []:
        bodies.setdefault(canonical(func), func)
    by_name = Counter(f["name"] for f in bodies.values())
    seen = Counter()
    out = {}
    for func in bodies.values():
        seen[func["name"]] += 1
        name = func["name"] if by_name[func["name"]] == 1 else f"{func['name']}#{seen[func['name']]}"
        stem = f"{slugify(func['name'])}-{seen[func['name']]}"
        out.setdefault(func["name"], []).append(
            (name, stem, build_manifest(func, name, stem, unknown_types)))
    return out


def main():
    """CLI entry point."""
    args, version, sha, wheel = pinned_wheel_args(__doc__.splitlines()[0])

    catalogs = args.out / "catalogs"
    if catalogs.exists():
        shutil.rmtree(catalogs)
    catalogs.mkdir(parents=True)
    tasks, skipped, sizes, unknown_types = [], Counter(), Counter(), Counter()
    with zipfile.ZipFile(wheel) as zf:
        for category in FITTING + NO_FIT:
            entries = read_jsonl(zf, member(zf, category))
            truth = ({a["id"]: a.get("ground_truth") or [] for a in
                      read_jsonl(zf, member(zf, category, answers=True))}
                     if category in FITTING else {})
            for entry in entries:
                query = query_of(entry)
                functions = catalog_of(entry, unknown_types)
                if not query:
                    skipped[f"{category}: empty query"] += 1
                    continue
                if not functions:
                    skipped[f"{category}: no function"] += 1
                    continue
                expected = []
                if category in FITTING:
                    called = {name for call in truth.get(entry["id"], []) for name in call}
                    if len(called) != 1 or not called <= functions.keys():
                        skipped[f"{category}: not one called function of the catalog"] += 1
                        continue
                    variants = functions[called.pop()]
                    if len(variants) != 1:
                        skipped[f"{category}: called name has several bodies"] += 1
                        continue
                    expected = [variants[0][0]]
                directory = catalogs / slugify(entry["id"])
                if directory.exists():
                    sys.exit(f"two entries map to {directory.name}")
                directory.mkdir()
                count = 0
                for variants in functions.values():
                    for _, stem, manifest in variants:
                        write_json(directory / f"{stem}.json", manifest)
                        count += 1
                sizes[count] += 1
                tasks.append({"id": entry["id"], "query": query, "catalog": directory.name,
                              "expected": expected, "category": category,
                              "split": split_of(entry["id"])})

    with open(args.out / "tasks.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(t, ensure_ascii=False) + "\n" for t in tasks)
    counts = Counter((t["split"], "fitting" if t["expected"] else "no-fit") for t in tasks)
    stats = {"source": {"package": "bfcl-eval", "version": version, "wheel": wheel.name,
                        "sha256": sha},
             "tasks": {f"{split} {kind}": n for (split, kind), n in sorted(counts.items())},
             "per_category": dict(Counter(t["category"] for t in tasks)),
             "catalog_sizes": {str(k): v for k, v in sorted(sizes.items())},
             "skipped": dict(skipped),
             "unknown_types_mapped_to_string": dict(unknown_types)}
    write_json(args.out / "STATS.json", stats)
    print(f"bfcl-eval {version} (sha256 {sha[:12]}…): {len(tasks)} catalogs; "
          + ", ".join(f"{k} {v}" for k, v in stats["tasks"].items())
          + f"; skipped {sum(skipped.values())}", file=sys.stderr)


if __name__ == "__main__":
    main()
