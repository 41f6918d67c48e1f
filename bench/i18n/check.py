#!/usr/bin/env python3
"""Check translated task sets against their English original.

A translated set is a JSON Lines file that carries the English tasks with only `query`
translated. For each language this checks that the file has exactly the English ids in the
same order, the same `category`, `expected` and `negative` (and `split` when either side has
one), no field the English task lacks, and a non-empty `query` that differs from the English
one. It prints counts and exits with status 1 at the first problem, naming it.

    python3 bench/i18n/check.py
    python3 bench/i18n/check.py bench/spoken-tasks.jsonl bench/i18n/spoken-tasks

The second argument is a prefix: the file for language `de` is `<prefix>.de.jsonl`.
Standard library only.
"""

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
DEFAULT_ENGLISH = REPO_ROOT / "bench" / "discovery-tasks.jsonl"
DEFAULT_PREFIX = REPO_ROOT / "bench" / "i18n" / "discovery-tasks"
DEFAULT_LANGUAGES = ("de", "fr", "es", "nl")

# Fields a translation must copy unchanged; `query` is the only one it may change.
LABEL_FIELDS = ("category", "expected", "negative")
OPTIONAL_LABEL_FIELDS = ("split",)


class CheckFailed(Exception):
    """The first problem found, worded for the person who has to fix the file."""


def read_tasks(path: Path) -> list[tuple[int, dict]]:
    """Return (line number, task) for every line of a JSON Lines file.

    Every line must be one JSON object: a blank line in the middle is reported rather
    than skipped, because it would shift line numbers between the English file and a
    translation and hide a missing task.
    """
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise CheckFailed(f"{path}: cannot read: {err.strerror or err}") from err
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline that ends the last line
    tasks = []
    for number, line in enumerate(lines, start=1):
        where = f"{path} line {number}"
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as err:
            raise CheckFailed(f"{where}: not valid UTF-8 at byte {err.start}") from err
        if not text.strip():
            raise CheckFailed(f"{where}: blank line (one JSON object per line expected)")
        try:
            task = json.loads(text)
        except json.JSONDecodeError as err:
            raise CheckFailed(f"{where}: invalid JSON: {err.msg} at column {err.colno}") from err
        if not isinstance(task, dict):
            raise CheckFailed(f"{where}: a JSON object was expected, found {type(task).__name__}")
        if not isinstance(task.get("id"), str) or not task["id"]:
            raise CheckFailed(f"{where}: missing or empty \"id\"")
        tasks.append((number, task))
    if not tasks:
        raise CheckFailed(f"{path}: no tasks")
    return tasks


def check_english(path: Path) -> list[tuple[int, dict]]:
    """The original is the reference every translation is held to, so it must be sound itself."""
    tasks = read_tasks(path)
    seen: dict[str, int] = {}
    for number, task in tasks:
        where = f"{path} line {number} (id {task['id']})"
        if task["id"] in seen:
            raise CheckFailed(f"{where}: id repeats line {seen[task['id']]}")
        seen[task["id"]] = number
        query = task.get("query")
        if not isinstance(query, str) or not query.strip():
            raise CheckFailed(f"{where}: missing or empty \"query\"")
    return tasks


def check_translation(english: list[tuple[int, dict]], path: Path) -> int:
    """Hold one translated file to the English tasks; return how many tasks it has."""
    translated = read_tasks(path)
    for (_, original), (number, task) in zip(english, translated):
        where = f"{path} line {number} (id {task['id']})"
        if task["id"] != original["id"]:
            raise CheckFailed(f"{where}: expected id {original['id']!r} here, as in the English file")
        for field in LABEL_FIELDS:
            if field not in task:
                raise CheckFailed(f"{where}: missing {field!r}")
            if task[field] != original.get(field):
                raise CheckFailed(
                    f"{where}: {field} is {json.dumps(task[field], ensure_ascii=False)}, "
                    f"the English task has {json.dumps(original.get(field), ensure_ascii=False)}"
                )
        for field in OPTIONAL_LABEL_FIELDS:
            if (field in task or field in original) and task.get(field) != original.get(field):
                ours = json.dumps(task[field]) if field in task else "absent"
                theirs = json.dumps(original[field]) if field in original else "no " + field
                raise CheckFailed(f"{where}: {field} is {ours}, the English task has {theirs}")
        extra = sorted(set(task) - set(original))
        if extra:
            raise CheckFailed(f"{where}: field(s) the English task does not have: {', '.join(extra)}")
        query = task.get("query")
        if not isinstance(query, str) or not query.strip():
            raise CheckFailed(f"{where}: missing or empty \"query\"")
        if query == original["query"]:
            raise CheckFailed(f"{where}: query is identical to the English one (not translated)")
    if len(translated) < len(english):
        missing_number, missing = english[len(translated)]
        raise CheckFailed(
            f"{path}: ends after {len(translated)} tasks; id {missing['id']!r} "
            f"(English line {missing_number}) and the rest are missing"
        )
    if len(translated) > len(english):
        number, task = translated[len(english)]
        raise CheckFailed(
            f"{path} line {number} (id {task['id']}): extra task; the English file has only {len(english)}"
        )
    return len(translated)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "english", nargs="?", type=Path, default=DEFAULT_ENGLISH,
        help=f"the English tasks file (default: {DEFAULT_ENGLISH.relative_to(REPO_ROOT)})",
    )
    parser.add_argument(
        "prefix", nargs="?", default=str(DEFAULT_PREFIX),
        help="path prefix of the translations, completed with .<lang>.jsonl "
        f"(default: {DEFAULT_PREFIX.relative_to(REPO_ROOT)})",
    )
    parser.add_argument(
        "--langs", nargs="+", default=list(DEFAULT_LANGUAGES), metavar="LANG",
        help=f"languages to check (default: {' '.join(DEFAULT_LANGUAGES)})",
    )
    args = parser.parse_args(argv)

    try:
        english = check_english(args.english)
        tasks = [task for _, task in english]
        negatives = sum(1 for task in tasks if task.get("negative") is True)
        categories = Counter(str(task.get("category")) for task in tasks)
        print(
            f"{args.english}: {len(tasks)} tasks ({len(tasks) - negatives} positive, "
            f"{negatives} negative) in {len(categories)} categories: "
            + ", ".join(f"{name} {count}" for name, count in sorted(categories.items()))
        )
        for lang in args.langs:
            path = Path(f"{args.prefix}.{lang}.jsonl")
            count = check_translation(english, path)
            print(f"{lang}: {path}: {count} tasks, ids, order and labels match, every query translated")
    except CheckFailed as problem:
        print(f"check.py: error: {problem}", file=sys.stderr)
        return 1
    print(f"ok: {len(args.langs)} language(s), {len(args.langs) * len(english)} translated tasks")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
