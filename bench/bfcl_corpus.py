#!/usr/bin/env python3
"""Build an OAP retrieval benchmark corpus from the BFCL data in the bfcl-eval wheel.

The wheel pinned (version + sha256) in bench/requirements-bfcl.txt is fetched with
``pip download --no-deps --require-hashes`` into ``DIR/.cache`` and read with zipfile;
it is never installed. Output: ``DIR/manifests/*.json`` (one OAP v1.0 manifest per
unique function), ``DIR/tasks.jsonl`` (bench/discovery-tasks.jsonl format),
``DIR/index.json`` (manifest name -> original BFCL name, file, categories) and
``DIR/STATS.json``. Standard library only; see bench/README.md.
"""
import argparse
import hashlib
import json
import re
import sys
import zipfile
from collections import Counter, defaultdict
from pathlib import Path
from urllib.parse import urlparse

from pinned_wheel import ensure_wheel, read_pin

CATEGORIES = ("multiple", "live_multiple", "parallel_multiple")
REQUIREMENTS = Path(__file__).with_name("requirements-bfcl.txt")
TYPE_MAP = {"dict": "object", "float": "number", "tuple": "array", "any": "string",
            "object": "object", "number": "number", "array": "array", "string": "string",
            "integer": "integer", "boolean": "boolean"}


def read_jsonl(zf, member):
    """Parse a JSON Lines member of the wheel."""
    return [json.loads(line) for line in zf.read(member).decode("utf-8").splitlines()
            if line.strip()]


def data_members(zf, category):
    """Exact wheel paths of a category's question and possible-answer files."""
    base = f"bfcl_eval/data/{{}}BFCL_v4_{category}.json"
    names = set(zf.namelist())
    question, answer = base.format(""), base.format("possible_answer/")
    missing = [m for m in (question, answer) if m not in names]
    if missing:
        sys.exit(f"wheel lacks {missing}")
    return question, answer


def slugify(text):
    """Lower-case, runs of non-alphanumerics -> '-'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "fn"


def canonical(func):
    """Canonical JSON of a BFCL function doc: equal strings = same function."""
    return json.dumps(func, sort_keys=True, ensure_ascii=False)


def convert_schema(schema, required, unknown_types, top_level):
    """Map one BFCL (python-ish JSON schema) parameter to an OAP parameter entry."""
    raw = schema.get("type", "string")
    if raw not in TYPE_MAP:
        unknown_types[raw] += 1
    out = {"type": TYPE_MAP.get(raw, "string")}
    if top_level or "description" in schema:
        out["description"] = schema.get("description", "")
    if required is not None:
        out["required"] = required
    for key in ("enum", "default"):
        if key in schema:
            out[key] = schema[key]
    if isinstance(schema.get("items"), dict):
        out["items"] = convert_schema(schema["items"], None, unknown_types, False)
    if schema.get("properties"):
        nested_req = set(schema.get("required") or [])
        out["properties"] = {k: convert_schema(v, k in nested_req, unknown_types, False)
                             for k, v in schema["properties"].items()}
    return out


def build_manifest(func, name, stem, unknown_types):
    """OAP v1.0 manifest for one BFCL function under manifest name ``name``."""
    schema = func.get("parameters") or {}
    req = set(schema.get("required") or [])
    params = {k: convert_schema(v, k in req, unknown_types, True)
              for k, v in (schema.get("properties") or {}).items()}
    listed = ", ".join(f"{k} ({p['type']}, {'required' if p['required'] else 'optional'})"
                       for k, p in params.items())
    sentence = (f"JSON object with parameters: {listed}." if params
                else "JSON object; this function takes no parameters.")
    return {
        "oap": "1.0",
        "name": name,
        "description": func.get("description", ""),
        "input": {"format": "application/json", "description": sentence, "parameters": params},
        "output": {"format": "application/json", "description": f"Result of {func['name']}."},
        "invoke": {"method": "POST", "url": f"https://bfcl.invalid/{stem}"},
        "tags": [],
    }


def pool_functions(questions):
    """De-duplicate functions; returns {canonical: record} in first-seen order.

    A name with several distinct contents gets ``name#1``, ``name#2``… (first-seen order)
    as manifest name for every variant; unique names are kept as they are.
    """
    pool, by_name = {}, defaultdict(list)
    for cat in CATEGORIES:
        for q in questions[cat]:
            for func in q["function"]:
                key = canonical(func)
                if key not in pool:
                    pool[key] = {"func": func, "categories": set()}
                    by_name[func["name"]].append(key)
                pool[key]["categories"].add(cat)
    for fname, keys in by_name.items():
        for i, key in enumerate(keys, 1):
            pool[key]["name"] = f"{fname}#{i}" if len(keys) > 1 else fname
            digest = hashlib.sha256(key.encode()).hexdigest()[:8]
            pool[key]["stem"] = f"{slugify(fname)}-{digest}"
    return pool, by_name


def build_tasks(questions, answers, pool, stats):
    """Task records for every question with a usable ground truth; counts skips."""
    tasks = []
    for cat in CATEGORIES:
        truth = {a["id"]: a.get("ground_truth") for a in answers[cat]}
        skipped = Counter()
        for q in questions[cat]:
            turn = q["question"][0] if q["question"] else []
            stats["system_messages_dropped"] += sum(m["role"] == "system" for m in turn)
            query = "\n".join(m["content"] for m in turn if m["role"] == "user").strip()
            local = {f["name"]: pool[canonical(f)]["name"] for f in q["function"]}
            gt = truth.get(q["id"])
            called = [name for call in (gt or []) for name in call]
            if q["id"] not in truth:
                skipped["no_answer_entry"] += 1
            elif not called:
                skipped["empty_ground_truth"] += 1
            elif any(n not in local for n in called):
                skipped["function_not_in_pool"] += 1
            elif not query:
                skipped["empty_query"] += 1
            else:
                expected = list(dict.fromkeys(local[n] for n in called))
                stats["repeated_calls_in_ground_truth"] += len(called) > len(expected)
                tasks.append({"id": q["id"], "category": cat, "query": query,
                              "expected": expected, "negative": False})
        stats["questions"][cat] = {"seen": len(questions[cat]),
                                   "kept": len(questions[cat]) - sum(skipped.values()),
                                   "skipped": dict(skipped)}
    return tasks


def validate(manifest_dir, tasks):
    """Re-read every manifest; check required fields, URLs, unique names, expected names."""
    errors, names = [], Counter()
    for path in sorted(manifest_dir.glob("*.json")):
        try:
            m = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            errors.append(f"{path.name}: invalid JSON ({exc})")
            continue
        for field in ("oap", "name", "description", "invoke"):
            if field not in m:
                errors.append(f"{path.name}: missing {field}")
        url = urlparse(m.get("invoke", {}).get("url", ""))
        if url.scheme != "https" or not url.netloc or not url.path.strip("/"):
            errors.append(f"{path.name}: bad invoke url")
        names[m.get("name")] += 1
    errors += [f"duplicate manifest name {n!r}" for n, c in names.items() if c > 1]
    errors += [f"{t['id']}: expected {n!r} has no manifest"
               for t in tasks for n in t["expected"] if n not in names]
    return errors, len(names)


def write_json(path, obj):
    """Deterministic pretty JSON (UTF-8, trailing newline)."""
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def pinned_wheel_args(description):
    """``--out`` and ``--requirements`` parsed, and the pinned wheel fetched or reused:
    (args, version, sha256, wheel path)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", required=True, type=Path, help="output directory")
    ap.add_argument("--requirements", type=Path, default=REQUIREMENTS,
                    help="pinned requirements file (default: %(default)s)")
    args = ap.parse_args()
    version, sha = read_pin(args.requirements, "bfcl-eval")
    return args, version, sha, ensure_wheel(args.out / ".cache", "bfcl-eval", version, sha)


def main():
    """CLI entry point."""
    args, version, sha, wheel = pinned_wheel_args(__doc__.splitlines()[0])

    questions, answers, files = {}, {}, {}
    with zipfile.ZipFile(wheel) as zf:
        for cat in CATEGORIES:
            qm, am = data_members(zf, cat)
            files[cat] = {"questions": qm, "answers": am}
            questions[cat], answers[cat] = read_jsonl(zf, qm), read_jsonl(zf, am)

    pool, by_name = pool_functions(questions)
    stats = {"source": {"package": "bfcl-eval", "version": version, "wheel": wheel.name,
                        "sha256": sha, "files": files},
             "functions_seen": {c: sum(len(q["function"]) for q in questions[c])
                                for c in CATEGORIES},
             "unique_manifests": len(pool), "distinct_function_names": len(by_name),
             "name_clashes": {"names": sum(len(k) > 1 for k in by_name.values()),
                              "manifests": sum(len(k) for k in by_name.values() if len(k) > 1),
                              "max_variants": max(len(k) for k in by_name.values())},
             "questions": {}, "system_messages_dropped": 0,
             "repeated_calls_in_ground_truth": 0}
    stats["functions_seen"]["total"] = sum(stats["functions_seen"].values())

    manifest_dir = args.out / "manifests"
    manifest_dir.mkdir(parents=True, exist_ok=True)
    for old in manifest_dir.glob("*.json"):
        old.unlink()
    unknown_types = Counter()
    for rec in pool.values():
        write_json(manifest_dir / f"{rec['stem']}.json",
                   build_manifest(rec["func"], rec["name"], rec["stem"], unknown_types))
    descs = [rec["func"].get("description", "") for rec in pool.values()]
    stats.update({"empty_descriptions": sum(not d.strip() for d in descs),
                  "descriptions_over_1000_chars": sum(len(d) > 1000 for d in descs),
                  "functions_without_parameters": sum(
                      not (r["func"].get("parameters") or {}).get("properties")
                      for r in pool.values()),
                  "unknown_types_mapped_to_string": dict(unknown_types)})
    write_json(args.out / "index.json", {
        rec["name"]: {"function": rec["func"]["name"], "file": f"manifests/{rec['stem']}.json",
                      "categories": sorted(rec["categories"])} for rec in pool.values()})

    tasks = build_tasks(questions, answers, pool, stats)
    with open(args.out / "tasks.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(t, ensure_ascii=False) + "\n" for t in tasks)
    queries = Counter(t["query"] for t in tasks)
    stats["tasks"] = {"total": len(tasks),
                      **{c: sum(t["category"] == c for t in tasks) for c in CATEGORIES},
                      "several_expected": sum(len(t["expected"]) > 1 for t in tasks),
                      "expected_is_clash_variant": sum(
                          any("#" in n for n in t["expected"]) for t in tasks),
                      "duplicate_query_texts": sum(c - 1 for c in queries.values() if c > 1)}

    errors, n_manifests = validate(manifest_dir, tasks)
    stats["validation"] = {"manifests_checked": n_manifests, "errors": len(errors)}
    write_json(args.out / "STATS.json", stats)
    for err in errors[:20]:
        print("ERROR:", err, file=sys.stderr)
    t = stats["tasks"]
    print(f"bfcl-eval {version} ({wheel.name}, sha256 {sha[:12]}…)\n"
          f"functions seen {stats['functions_seen']['total']}, manifests {len(pool)} "
          f"({stats['distinct_function_names']} names, {stats['name_clashes']['names']} clashing)\n"
          f"tasks {t['total']}: " + ", ".join(f"{c} {t[c]}" for c in CATEGORIES)
          + f"; several expected {t['several_expected']}\n"
          f"validation: {n_manifests} manifests, {len(errors)} errors -> {args.out}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
