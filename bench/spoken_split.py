#!/usr/bin/env python3
"""Set or check the `split` field of a spoken-request tasks file.

Each task's split is fixed by its id alone, so nobody can move a request
between halves after seeing how an engine does on it:

    split = "tuning" if sha256("oapd-spoken-split-v1:" + id)[0] < 128
            else "evaluation"

Usage:
    python3 bench/spoken_split.py bench/spoken-tasks.jsonl          # rewrite split in place
    python3 bench/spoken_split.py --check bench/spoken-tasks.jsonl  # verify, change nothing
    python3 bench/spoken_split.py --check --labels-from bench/spoken-tasks.jsonl \
        bench/i18n/spoken-tasks.de.jsonl                            # a translation keeps the labels

`--check` fails, naming the id, when a split is wrong, an id repeats,
`negative` disagrees with `expected`, an expected name is not in the
catalog, or the category is not the first expected name (or `no-fit:…`
for a request nothing fits). The catalog is every manifest `name` in
manifests/bundled, tests/fixtures/reference-manifests/oap-dev and
tests/fixtures/reference-manifests/manifest-repo (top level only, so its
disabled/ folder stays out), de-duplicated by name.

Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

SPLIT_SALT = "oapd-spoken-split-v1:"
TUNING, EVALUATION = "tuning", "evaluation"
REQUIRED_FIELDS = ("id", "category", "query", "expected", "negative", "split")
CATALOG_DIRS = (
    "manifests/bundled",
    "tests/fixtures/reference-manifests/oap-dev",
    "tests/fixtures/reference-manifests/manifest-repo",
)
NO_FIT_PREFIX = "no-fit:"
ID_PATTERN = re.compile(r"^sp-[a-z0-9]+(?:-[a-z0-9]+)*-\d{3}$")


class TasksError(Exception):
    """A tasks file or the catalog cannot be read as this script needs."""


def split_for(task_id: str) -> str:
    first_byte = hashlib.sha256((SPLIT_SALT + task_id).encode("utf-8")).digest()[0]
    return TUNING if first_byte < 128 else EVALUATION


def category_slug(category: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", category.lower()).strip("-")


def load_catalog(repo_root: Path) -> set[str]:
    names: set[str] = set()
    for rel in CATALOG_DIRS:
        folder = repo_root / rel
        if not folder.is_dir():
            raise TasksError(f"catalog folder {folder} is missing (is --repo-root right?)")
        for path in sorted(folder.glob("*.json")):
            try:
                manifest = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as err:
                raise TasksError(f"manifest {path} cannot be read as JSON: {err}") from err
            name = manifest.get("name") if isinstance(manifest, dict) else None
            if not isinstance(name, str) or not name:
                raise TasksError(f"manifest {path} has no string `name`")
            names.add(name)
    if not names:
        raise TasksError(f"no manifests found under {repo_root}")
    return names


def read_tasks(path: Path) -> list[dict]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise TasksError(f"cannot read {path}: {err}") from err
    tasks = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            task = json.loads(line)
        except json.JSONDecodeError as err:
            raise TasksError(f"{path}:{number}: not a JSON object: {err}") from err
        if not isinstance(task, dict):
            raise TasksError(f"{path}:{number}: not a JSON object")
        if not isinstance(task.get("id"), str) or not task["id"]:
            raise TasksError(f"{path}:{number}: has no string `id`")
        tasks.append(task)
    return tasks


def write_tasks(path: Path, tasks: list[dict]) -> None:
    text = "".join(json.dumps(task, ensure_ascii=False) + "\n" for task in tasks)
    path.write_text(text, encoding="utf-8")


def task_problems(task: dict, catalog: set[str]) -> list[str]:
    """Everything wrong with one task on its own; empty when it is sound."""
    problems = []
    missing = [field for field in REQUIRED_FIELDS if field not in task]
    if missing:
        return [f"missing field(s) {', '.join(missing)}"]
    task_id = task["id"]
    if not ID_PATTERN.match(task_id):
        problems.append("id is not of the form sp-<category-slug>-NNN")
    if not isinstance(task["query"], str) or not task["query"].strip():
        problems.append("query is empty")
    expected = task["expected"]
    if not isinstance(expected, list) or not all(isinstance(n, str) for n in expected):
        return problems + ["expected is not a list of manifest names"]
    if len(set(expected)) != len(expected):
        problems.append("expected names a tool twice")
    unknown = [name for name in expected if name not in catalog]
    if unknown:
        problems.append(f"expected name(s) not in the catalog: {', '.join(unknown)}")
    if task["negative"] is not (not expected):
        problems.append(f"negative is {task['negative']!r} but expected is {expected!r}")
    category = task["category"]
    if expected:
        if category != expected[0]:
            problems.append(f"category {category!r} is not the first expected name {expected[0]!r}")
    elif not (isinstance(category, str) and category.startswith(NO_FIT_PREFIX)
              and len(category) > len(NO_FIT_PREFIX)):
        problems.append(f"category {category!r} of a no-fit request does not start with {NO_FIT_PREFIX!r}")
    if isinstance(category, str) and ID_PATTERN.match(task_id):
        if not task_id.startswith(f"sp-{category_slug(category)}-"):
            problems.append(f"id does not carry the category slug {category_slug(category)!r}")
    if task["split"] != split_for(task_id):
        problems.append(f"split is {task['split']!r}, the rule gives {split_for(task_id)!r}")
    return problems


def check(tasks: list[dict], catalog: set[str], labels_from: list[dict] | None) -> list[str]:
    errors = []
    seen: set[str] = set()
    for task in tasks:
        task_id = task["id"]
        if task_id in seen:
            errors.append(f"{task_id}: id repeats")
        seen.add(task_id)
        errors.extend(f"{task_id}: {problem}" for problem in task_problems(task, catalog))
    if labels_from is not None:
        reference = {task["id"]: task for task in labels_from}
        for task in tasks:
            original = reference.get(task["id"])
            if original is None:
                errors.append(f"{task['id']}: not in the labelled set")
                continue
            for field in ("category", "expected", "negative", "split"):
                if task.get(field) != original.get(field):
                    errors.append(f"{task['id']}: {field} differs from the labelled set")
        for task_id in reference.keys() - seen:
            errors.append(f"{task_id}: missing from this file")
    return errors


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path, help="tasks files (JSON lines)")
    parser.add_argument("--check", action="store_true", help="verify only; exit 1 on any problem")
    parser.add_argument("--labels-from", type=Path,
                        help="labelled set whose ids, categories, expected, negative and split every file must repeat")
    parser.add_argument("--repo-root", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="repository root holding the manifest folders (default: this script's repository)")
    args = parser.parse_args(argv)
    try:
        catalog = load_catalog(args.repo_root)
        labels_from = read_tasks(args.labels_from) if args.labels_from else None
        failed = False
        for path in args.files:
            tasks = read_tasks(path)
            if not args.check:
                for task in tasks:
                    task["split"] = split_for(task["id"])
                write_tasks(path, tasks)
            errors = check(tasks, catalog, labels_from)
            for error in errors:
                print(f"{path}: {error}", file=sys.stderr)
            failed = failed or bool(errors)
            tuning = sum(task.get("split") == TUNING for task in tasks)
            status = "FAILED" if errors else "ok"
            print(f"{path}: {len(tasks)} tasks, {tuning} tuning, {len(tasks) - tuning} evaluation: {status}")
        return 1 if failed else 0
    except TasksError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
