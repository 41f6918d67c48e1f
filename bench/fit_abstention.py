#!/usr/bin/env python3
"""Fit the "nothing fits" score of hybrid discovery on tuning data only.

Input: ``TASKS:DUMP`` pairs, a task file (bench/discovery-tasks.jsonl format,
optionally with ``split``) and the ``oap-bench retrieval --dump`` output made
from it. Only tasks whose split is ``tuning`` (or that have no split: the
shared task set, itself tuning data) are read; evaluation tasks are refused.

Per task the features are those ``Scoring::abstention_score`` computes from
the best candidate alone: its cosine, its word evidence
(``scoring::abstention_evidence``: each shared word's idf relative to a
word found in one document, times tf / (tf + k1), so it does not grow with
the catalog; capped at 2; dumps older than that field give BM25 units) and
the number of words embedded.
A logistic model (fitting vs no-fit, classes weighted equally) gives the
weights; the score is expressed in cosine units (``cosine + a * lexical +
b * (words - 8) / 8``), so the configured ``min_score_hybrid`` keeps its
meaning of a cosine-like threshold. Prints the weights and, per threshold,
the share of no-fit and of fitting tuning queries abstained; then, for the
rule the daemon applies (``cosine + weight * min(evidence, cap)``), a grid
of weight and cap with the pooled AUROC and the shares abstained at the
threshold given by ``--threshold`` (default 0.30). ``--from X`` starts the
threshold table at X (default 0.20) for an encoder whose cosines sit
higher, such as multilingual-e5-small's.

    python3 bench/fit_abstention.py bench/discovery-tasks.jsonl:target/bench/shared.dump \\
        target/bench/ha-intents/tasks.jsonl:target/bench/ha-intents/tuning.dump
"""
import json
import math
import sys


def features(line):
    """(cosine, lexical, words) of the best candidate of a dump line."""
    top = line["pool"][0] if line["pool"] else [None, None, 0.0, 0.0, 0.0]
    cosine = top[2] if top[2] is not None else 0.0
    words = len(line["dense_text"].split())
    evidence = top[4] if len(top) > 4 else top[3]
    return [cosine, evidence, (min(words, 40) - 8) / 8.0]


def load(pairs):
    """Rows of (features, fits, source) from tuning tasks only."""
    rows = []
    for pair in pairs:
        tasks_path, dump_path = pair.split(":", 1)
        tasks = {}
        with open(tasks_path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    t = json.loads(line)
                    tasks[t["id"]] = t
        with open(dump_path, encoding="utf-8") as f:
            for line in f:
                d = json.loads(line)
                t = tasks[d["id"]]
                if t.get("split", "tuning") != "tuning":
                    sys.exit(f"{dump_path}: {d['id']} is {t['split']} data; dump --split tuning")
                if d.get("soft"):
                    continue
                rows.append((features(d), bool(t["expected"]), tasks_path))
    return rows


def fit(rows, steps=4000, rate=0.5, l2=1e-3):
    """Class-balanced logistic regression by gradient descent."""
    n_pos = sum(r[1] for r in rows)
    n_neg = len(rows) - n_pos
    weight = {True: 0.5 / max(n_pos, 1), False: 0.5 / max(n_neg, 1)}
    dim = len(rows[0][0])
    w, b = [0.0] * dim, 0.0
    for _ in range(steps):
        gw, gb = [l2 * x for x in w], 0.0
        for x, y, _ in rows:
            z = b + sum(wi * xi for wi, xi in zip(w, x))
            p = 1.0 / (1.0 + math.exp(-max(min(z, 30), -30)))
            g = (p - (1.0 if y else 0.0)) * weight[y]
            gb += g
            gw = [gi + g * xi for gi, xi in zip(gw, x)]
        w = [wi - rate * gi for wi, gi in zip(w, gw)]
        b -= rate * gb
    return w, b


def auroc(scored):
    """AUROC of (score, fits) pairs."""
    pos = [s for s, y in scored if y]
    neg = [s for s, y in scored if not y]
    wins = sum((p > q) + 0.5 * (p == q) for p in pos for q in neg)
    return wins / max(len(pos) * len(neg), 1)


def grid(rows, threshold):
    """AUROC and shares abstained of cosine + weight * min(evidence, cap)."""
    print(f"\nrule: cosine + weight * min(evidence, cap), threshold {threshold:.2f}")
    print("  | weight | cap | AUROC | no-fit abstained | fitting abstained |")
    for weight in [0.0, 0.05, 0.10, 0.15, 0.20, 0.25]:
        for cap in [0.3, 0.45, 0.6, 0.8, 1.0]:
            def score(x):
                return x[0] + weight * min(max(x[1], 0.0), cap)
            neg = [score(x) < threshold for x, y, _ in rows if not y]
            pos = [score(x) < threshold for x, y, _ in rows if y]
            print(f"  | {weight:.2f} | {cap:.2f} "
                  f"| {auroc([(score(x), y) for x, y, _ in rows]):.3f} "
                  f"| {sum(neg) / max(len(neg), 1):.3f} "
                  f"| {sum(pos) / max(len(pos), 1):.3f} |")
            if weight == 0.0:
                break


def main():
    """CLI entry point."""
    args = sys.argv[1:]
    threshold = 0.30
    start = 0.20
    if "--from" in args:
        i = args.index("--from")
        start = float(args[i + 1])
        del args[i:i + 2]
    if "--threshold" in args:
        i = args.index("--threshold")
        threshold = float(args[i + 1])
        del args[i:i + 2]
    rows = load(args)
    w, b = fit(rows)
    # In cosine units: divide by the cosine's weight.
    a, c = w[1] / w[0], w[2] / w[0]
    print(f"tuning rows {len(rows)}: fitting {sum(r[1] for r in rows)}, "
          f"no-fit {sum(not r[1] for r in rows)}")
    print(f"logistic: cosine {w[0]:.3f}, lexical {w[1]:.3f}, words {w[2]:.3f}, bias {b:.3f}")
    print(f"score = cosine + {a:.3f} * lexical + {c:.3f} * (words - 8) / 8;"
          f" 0.5 probability at {-b / w[0]:.3f}")
    for name, score in [("cosine", lambda x: x[0]),
                        ("calibrated", lambda x: x[0] + a * x[1] + c * x[2])]:
        print(f"\n{name}: AUROC {auroc([(score(x), y) for x, y, _ in rows]):.3f}")
        for source in sorted({r[2] for r in rows}):
            part = [(score(x), y) for x, y, s in rows if s == source]
            print(f"  {source}: AUROC {auroc(part):.3f}")
        print("  | threshold | no-fit abstained | fitting abstained |")
        for i in range(16):
            t = start + 0.02 * i
            neg = [score(x) < t for x, y, _ in rows if not y]
            pos = [score(x) < t for x, y, _ in rows if y]
            print(f"  | {t:.2f} | {sum(neg) / max(len(neg), 1):.3f} "
                  f"| {sum(pos) / max(len(pos), 1):.3f} |")
    grid(rows, threshold)


if __name__ == "__main__":
    main()
