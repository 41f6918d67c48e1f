#!/usr/bin/env python3
"""Train the query adapter (crates/oap-discovery/src/adapter.rs) on tuning data only.

The adapter maps a query embedding q to normalise(q + U (V^T q)); documents are
unchanged. It is trained with a softmax over documents (temperature TAU) so
that a request lands nearer the description of the tool that serves it.

Training pairs (query vector, tool document vector), all tuning data:

* ``bfcl-extra``: BFCL's single-function categories (simple_python, simple_java,
  simple_javascript, live_simple, parallel, live_parallel) from the pinned
  ``bfcl-eval`` wheel (bench/requirements-bfcl.txt), minus every function
  whose name also appears in the BFCL retrieval corpus (multiple,
  live_multiple, parallel_multiple): that corpus stays a check, not training.
* the ``tuning`` halves of the held-out corpora (bench/public_corpus.py): their
  tuning queries, and only tuning tools as documents. The evaluation halves
  are never read: ``oap-bench retrieval --split tuning`` embeds only tuning
  queries, and this script drops every document whose tool is not ``tuning``.

The shared task set and the BFCL corpus are not trained on; they are the
floors the adapter must keep. About a fifth of the training tools (by a hash
of the tool name) is held out for early stopping and for choosing the rank;
their documents are left out of the training softmax, so the held-out score
says how the adapter does on tools it has never seen.

Usage (vectors from the real model, dumped by oap-bench):

    python3 bench/train_adapter.py prepare --out target/bench/adapter-train
    oap-bench retrieval --tasks target/bench/adapter-train/tasks.jsonl \\
        --dir target/bench/adapter-train/manifests --dump-vectors V_BFCL.jsonl
    oap-bench retrieval --tasks target/bench/ha-intents/tasks.jsonl \\
        --dir target/bench/ha-intents/manifests --split tuning --dump-vectors V_HA.jsonl
    (same for nestful)
    python3 bench/train_adapter.py train \\
        --data V_BFCL.jsonl --data V_HA.jsonl:target/bench/ha-intents/index.json \\
        --data V_NESTFUL.jsonl:target/bench/nestful/index.json \\
        --model ad404e0d5b244ee2 --out crates/oap-discovery/adapters/minilm-l6-tools.oqa

numpy is pinned in bench/requirements-adapter.txt; the seed is fixed.
"""
import argparse
import hashlib
import json
import struct
import sys
import zipfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bfcl_corpus import (REQUIREMENTS as BFCL_REQUIREMENTS, CATEGORIES as CORPUS_CATEGORIES,  # noqa: E402
                         build_manifest, canonical, read_jsonl, slugify)
from pinned_wheel import ensure_wheel, read_pin  # noqa: E402

EXTRA_CATEGORIES = ("simple_python", "simple_java", "simple_javascript", "live_simple",
                    "parallel", "live_parallel")
SALT = "oapd-adapter-holdout-v1"
HOLDOUT_SHARE = 0.2
MAGIC = b"OAPQADP1"


def holdout(name):
    """Whether a training tool is held out for early stopping (hash of its name)."""
    digest = hashlib.sha256(f"{SALT}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < HOLDOUT_SHARE


def prepare(args):
    """BFCL's single-function questions whose function is not in the BFCL corpus."""
    version, sha = read_pin(BFCL_REQUIREMENTS, "bfcl-eval")
    wheel = ensure_wheel(args.out / ".cache", "bfcl-eval", version, sha)
    with zipfile.ZipFile(wheel) as zf:
        def questions(cat):
            return read_jsonl(zf, f"bfcl_eval/data/BFCL_v4_{cat}.json")
        corpus_names = {f["name"] for cat in CORPUS_CATEGORIES
                        for q in questions(cat) for f in q["function"]}
        pool, tasks, skipped = {}, [], Counter()
        for cat in EXTRA_CATEGORIES:
            for q in questions(cat):
                funcs = q["function"]
                if len(funcs) != 1:
                    skipped["several functions"] += 1
                    continue
                func = funcs[0]
                if func["name"] in corpus_names:
                    skipped["function in the BFCL corpus"] += 1
                    continue
                turn = q["question"][0] if q["question"] else []
                query = "\n".join(m["content"] for m in turn if m["role"] == "user").strip()
                if not query:
                    skipped["empty query"] += 1
                    continue
                key = canonical(func)
                if key not in pool:
                    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
                    pool[key] = {"func": func, "name": f"{func['name']}@{digest}",
                                 "stem": f"{slugify(func['name'])}-{digest}"}
                tasks.append({"id": q["id"], "query": query,
                              "expected": [pool[key]["name"]], "negative": False})
    manifests = args.out / "manifests"
    manifests.mkdir(parents=True, exist_ok=True)
    for old in manifests.glob("*.json"):
        old.unlink()
    unknown = Counter()
    for rec in pool.values():
        manifest = build_manifest(rec["func"], rec["name"], rec["stem"], unknown)
        (manifests / f"{rec['stem']}.json").write_text(
            json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    with open(args.out / "tasks.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(t, ensure_ascii=False) + "\n" for t in tasks)
    print(f"bfcl-eval {version}: {len(tasks)} training queries over {len(pool)} functions; "
          f"skipped {dict(skipped)} -> {args.out}")


def load_dump(spec):
    """(docs {name: vector}, tasks [(query vector, [names])]) of one --data entry.

    ``DUMP[:INDEX]``: with a corpus index.json, only its ``tuning`` tools count.
    """
    import numpy as np
    path, _, index = spec.partition(":")
    allowed = None
    if index:
        info = json.loads(Path(index).read_text(encoding="utf-8"))
        allowed = {name for name, rec in info.items() if rec.get("split") == "tuning"}
    docs, tasks = {}, []
    for line in open(path, encoding="utf-8"):
        rec = json.loads(line)
        if "doc" in rec:
            if allowed is not None and rec["doc"] not in allowed:
                continue
            # The description row (the engine's only default row).
            best = max(rec["rows"], key=lambda r: r[0])
            docs[rec["doc"]] = np.asarray(best[1], dtype=np.float32)
        else:
            expected = [e for e in rec["expected"] if e in docs]
            if expected and len(expected) == len(rec["expected"]):
                tasks.append((np.asarray(rec["query"], dtype=np.float32), expected))
    return docs, tasks


def write_adapter(path, model, u, v):
    """The .oqa file: magic, dim, rank, model id, U and V as f16."""
    import numpy as np
    dim, rank = u.shape
    body = MAGIC + struct.pack("<III", dim, rank, len(model)) + model.encode()
    body += u.astype("<f2").tobytes() + v.astype("<f2").tobytes()
    Path(path).write_bytes(body)
    return hashlib.sha256(body).hexdigest()


def train(args):
    import numpy as np
    rng = np.random.default_rng(args.seed)
    names, doc_vecs, queries, positives, groups = [], [], [], [], []
    for g, spec in enumerate(args.data):
        docs, tasks = load_dump(spec)
        base = len(names)
        local = {n: base + i for i, n in enumerate(docs)}
        names += [f"{g}:{n}" for n in docs]
        doc_vecs += list(docs.values())
        for q, expected in tasks:
            queries.append(q)
            positives.append([local[e] for e in expected])
            groups.append(g)
        print(f"{spec}: {len(docs)} tuning documents, {len(tasks)} queries")
    D = np.stack(doc_vecs)
    Q = np.stack(queries)
    held_doc = np.array([holdout(n) for n in names])
    held_q = np.array([any(held_doc[p] for p in pos) for pos in positives])
    Y = np.zeros((len(Q), len(D)), dtype=np.float32)
    for i, pos in enumerate(positives):
        Y[i, pos] = 1.0
    # Each source weighs the same in the loss (ha-intents has many queries
    # per tool, BFCL one or two).
    counts = Counter(g for g, h in zip(groups, held_q) if not h)
    weight = np.array([0.0 if h else 1.0 / counts[g] for g, h in zip(groups, held_q)])
    weight /= weight.sum()
    train_mask = ~held_doc  # held-out tools are no candidates in training

    def forward(U, V, X):
        T = X @ V
        Z = X + T @ U.T
        n = np.linalg.norm(Z, axis=1, keepdims=True)
        return T, Z, n, Z / n

    doc_group = np.array([int(n.split(":", 1)[0]) for n in names])

    def evaluate(U, V, rows):
        """MRR over all documents of the query's own source, per source, and
        their mean (each source counts the same, however many queries)."""
        _, _, _, P = forward(U, V, Q[rows])
        S = P @ D.T
        mrr = {}
        for i, s in zip(np.flatnonzero(rows), S):
            s = np.where(doc_group == groups[i], s, -np.inf)
            best_pos = max(s[p] for p in positives[i])
            mrr.setdefault(groups[i], []).append(1.0 / (int((s > best_pos).sum()) + 1))
        per = [float(np.mean(mrr[g])) for g in sorted(mrr)]
        return per, float(np.mean(per))

    dim = Q.shape[1]
    results = []
    for rank in args.ranks:
        U = np.zeros((dim, rank))
        V = rng.normal(0, 1 / np.sqrt(dim), (dim, rank))
        m = {k: np.zeros_like(x) for k, x in (("U", U), ("V", V))}
        s2 = {k: np.zeros_like(x) for k, x in (("U", U), ("V", V))}
        best = (evaluate(np.zeros((dim, rank)), V, held_q)[1], 0, U.copy(), V.copy())
        base_val = best[0]
        if args.verbose:
            print(f"  rank {rank} step 0: held-out MRR per source "
                  f"{[round(x, 3) for x in evaluate(U * 0, V, held_q)[0]]}")
        rows = ~held_q
        Xt, Yt, Wt = Q[rows], Y[rows][:, train_mask], weight[rows]
        Dt = D[train_mask]
        for step in range(1, args.steps + 1):
            T, Z, n, P = forward(U, V, Xt)
            logits = (P @ Dt.T) / args.tau
            logits -= logits.max(axis=1, keepdims=True)
            E = np.exp(logits)
            Pr = E / E.sum(axis=1, keepdims=True)
            # Multi-positive cross-entropy: -log sum over expected tools.
            pos_mass = (Pr * Yt).sum(axis=1, keepdims=True)
            G = (Pr - Pr * Yt / pos_mass) * Wt[:, None] / args.tau  # dL/dlogits
            Gp = G @ Dt
            Gz = (Gp - P * (P * Gp).sum(axis=1, keepdims=True)) / n
            gU = Gz.T @ T + args.decay * U
            gV = Xt.T @ (Gz @ U) + args.decay * V
            for k, x, g in (("U", U, gU), ("V", V, gV)):
                m[k] = 0.9 * m[k] + 0.1 * g
                s2[k] = 0.999 * s2[k] + 0.001 * g * g
                x -= args.lr * (m[k] / (1 - 0.9**step)) / (np.sqrt(s2[k] / (1 - 0.999**step)) + 1e-8)
            if step % 25 == 0:
                val = evaluate(U, V, held_q)
                if args.verbose:
                    print(f"  rank {rank} step {step}: held-out MRR per source "
                          f"{[round(x, 3) for x in val[0]]}, training "
                          f"{[round(x, 3) for x in evaluate(U, V, ~held_q)[0]]}")
                if val[1] > best[0]:
                    best = (val[1], step, U.copy(), V.copy())
        if args.no_early_stop:
            best = (evaluate(U, V, held_q)[1], args.steps, U.copy(), V.copy())
        tr = evaluate(best[2], best[3], ~held_q)
        print(f"rank {rank}: held-out MRR (mean of sources) {base_val:.3f} -> {best[0]:.3f} (best step {best[1]}), "
              f"training MRR {tr[1]:.3f}")
        results.append((best[0], rank, best[2], best[3]))
    score, rank, U, V = max(results, key=lambda r: (r[0], -r[1]))
    if args.out:
        sha = write_adapter(args.out, args.model, U, V)
        print(f"wrote {args.out}: rank {rank}, held-out MRR {score:.3f}, sha256 {sha}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="write the BFCL training corpus")
    p.add_argument("--out", type=Path, required=True)
    t = sub.add_parser("train", help="train on oap-bench --dump-vectors files")
    t.add_argument("--data", action="append", required=True,
                   help="DUMP[:INDEX.json]; with an index only its tuning tools count")
    t.add_argument("--model", required=True, help="sha256 prefix of the model (its id after '@')")
    t.add_argument("--out", help="adapter file to write")
    t.add_argument("--ranks", type=int, nargs="+", default=[8, 16, 32])
    t.add_argument("--steps", type=int, default=400)
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--tau", type=float, default=0.05)
    t.add_argument("--decay", type=float, default=1e-3)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--no-early-stop", action="store_true",
                   help="keep the weights after --steps (for measuring a trained adapter)")
    t.add_argument("--verbose", action="store_true", help="print the curves")
    args = ap.parse_args()
    prepare(args) if args.command == "prepare" else train(args)


if __name__ == "__main__":
    main()
