"""Build a signed oapd index snapshot once, on a Ray cluster.

Each step runs the `oapd` binary itself, so the vectors are the ones a
board computes for the same texts; Ray only distributes the work:

1. shard: the domain list (one domain or manifest host per line) into N shards;
2. crawl: `oapd crawl --once DOMAIN...` per shard, into the shard's data dir;
3. request rows: `oapd requests generate` per shard, for the tools without
   requests of their own, against an Ollama API (skipped without --ollama);
4. index: `oapd index` per shard, which embeds with the board's encoder;
5. assemble and sign (once, in the driver): the shards' crawled manifests
   and request rows in one data dir, `oapd index` with the shard indexes as
   vector donors (nothing is embedded twice), `oapd snapshot build`, then
   `oapd snapshot verify`.

Steps 2-4 are one Ray task per shard (`num_cpus=1`); a task returns its
shard's files through Ray's object store, so workers need no shared disk,
and the driver unpacks each as it arrives.
Every node needs the same `oapd` binary, encoder model and whatever files
the configuration names, at the same paths.

    python oapd_pipeline.py --domains domains.txt --shards 64 --work /srv/build \\
        --oapd /usr/bin/oapd --config builder.yaml --key snapshot.key \\
        --ollama http://127.0.0.1:11434 --model qwen3:4b --out /srv/snapshot-1

The summary (per shard: node, counts, seconds per step) is printed as JSON.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import ray

# The request-rows file `oapd requests generate` writes and `oapd index`
# reads in a data dir (the daemon's cache format).
ROWS_FILE = "generated-requests.json"
# The index file `oapd index` writes in a data dir.
INDEX_FILE = "index.oapx"
# The crawler's store of crawled manifests in a data dir.
CRAWLED_DIR = "crawled"
# The rows file format this pipeline merges.
ROWS_FORMAT = 1


class PipelineError(Exception):
    """A step failed; the message names the step, the shard and the cause."""


def read_domains(path: Path) -> list[str]:
    """The domains of a list file: one a line, blank lines and `#` comments
    skipped, duplicates dropped (first kept)."""
    seen: dict[str, None] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        domain = line.split("#", 1)[0].strip()
        if not domain:
            continue
        if any(c.isspace() for c in domain):
            raise PipelineError(f"{path}:{number}: {domain!r} is not one domain")
        seen.setdefault(domain, None)
    if not seen:
        raise PipelineError(f"{path}: no domains")
    return list(seen)


def shard(domains: list[str], shards: int) -> list[list[str]]:
    """Round-robin shards (no empty ones): neighbouring lines, often one
    operator's domains, land on different workers."""
    if shards < 1:
        raise PipelineError(f"--shards {shards}: at least 1")
    count = min(shards, len(domains))
    return [domains[i::count] for i in range(count)]


def run_oapd(oapd: str, args: list[str], env: dict[str, str], what: str) -> str:
    """Runs oapd; its stdout, or a PipelineError with its stderr's tail."""
    done = subprocess.run(
        [oapd, *args], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise PipelineError(
            f"{what}: `oapd {' '.join(args[:3])} ...` exited {done.returncode}\n"
            f"{done.stdout.strip()}\n{tail}"
        )
    return done.stdout


def oapd_env(config: Path | None, data_dir: Path, threads: int) -> dict[str, str]:
    """The environment of one oapd run: the configuration, this data dir,
    and as many compute threads as the task holds CPUs."""
    env = dict(os.environ)
    if config is not None:
        env["OAPD_CONFIG"] = str(config)
    env["OAP_INDEX_DATA_DIR"] = str(data_dir)
    env["RAYON_NUM_THREADS"] = str(threads)
    return env


def crawl_counts(stdout: str) -> dict[str, int]:
    """`N updated, N unchanged, N failed; index: N manifests` of `oapd crawl`."""
    found = re.search(r"(\d+) updated, (\d+) unchanged, (\d+) failed", stdout)
    if not found:
        return {}
    updated, unchanged, failed = (int(n) for n in found.groups())
    return {"updated": updated, "unchanged": unchanged, "failed": failed}


def index_counts(stdout: str) -> dict[str, int]:
    """`N manifests, N rows (N embedded, ...` of `oapd index`."""
    found = re.search(r"(\d+) manifests, (\d+) rows \((\d+) embedded", stdout)
    if not found:
        raise PipelineError(f"oapd index printed no summary: {stdout.strip()!r}")
    docs, rows, embedded = (int(n) for n in found.groups())
    return {"manifests": docs, "rows": rows, "embedded": embedded}


def shard_archive(data_dir: Path) -> bytes:
    """The shard's results as one tar: crawled manifests, rows, index."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in (CRAWLED_DIR, ROWS_FILE, INDEX_FILE):
            if (data_dir / name).exists():
                tar.add(data_dir / name, arcname=name)
    return buffer.getvalue()


def build_shard(
    number: int,
    domains: list[str],
    oapd: str,
    config_text: str | None,
    ollama: str | None,
    model: str | None,
    concurrency: int,
    threads: int,
) -> dict:
    """Steps 2-4 for one shard, in a scratch dir on whichever node runs it."""
    import tempfile

    context = ray.get_runtime_context()
    report: dict = {
        "shard": number,
        "domains": len(domains),
        "node_id": context.get_node_id(),
        "pid": os.getpid(),
        "seconds": {},
    }
    with tempfile.TemporaryDirectory(prefix=f"oapd-shard-{number}-") as scratch:
        scratch_dir = Path(scratch)
        data_dir = scratch_dir / "data"
        data_dir.mkdir()
        config = None
        if config_text is not None:
            config = scratch_dir / "config.yaml"
            config.write_text(config_text, encoding="utf-8")
        env = oapd_env(config, data_dir, threads)

        # The crawl only fetches: the index step embeds, once, with the rows.
        crawl_env = dict(env, OAP_EMBEDDING_ENABLED="false")
        started = time.monotonic()
        done = subprocess.run(
            [oapd, "crawl", "--once", *domains],
            env=crawl_env,
            capture_output=True,
            text=True,
            check=False,
        )
        report["seconds"]["crawl"] = time.monotonic() - started
        counts = crawl_counts(done.stdout)
        if not counts:
            # No summary: oapd itself failed, not some domains.
            tail = "\n".join(done.stderr.strip().splitlines()[-15:])
            raise PipelineError(
                f"shard {number}: oapd crawl exited {done.returncode} without a summary\n{tail}"
            )
        # Domains that failed are reported, not fatal: the public web
        # always has some down.
        report["crawl"] = counts

        if ollama and (data_dir / CRAWLED_DIR).is_dir():
            started = time.monotonic()
            stdout = run_oapd(
                oapd,
                [
                    "requests", "generate",
                    "--crawled", str(data_dir / CRAWLED_DIR),
                    "--out", str(data_dir / ROWS_FILE),
                    "--ollama", ollama,
                    "--model", model or "",
                    "--concurrency", str(concurrency),
                ],
                env,
                f"shard {number}: request rows",
            )
            report["seconds"]["requests"] = time.monotonic() - started
            report["requests"] = stdout.strip()

        started = time.monotonic()
        stdout = run_oapd(oapd, ["index"], env, f"shard {number}: index")
        report["seconds"]["index"] = time.monotonic() - started
        report["index"] = index_counts(stdout)
        archive = shard_archive(data_dir)
    report["archive_bytes"] = len(archive)
    return {"report": report, "archive": archive}


def merge_rows(files: list[Path], out: Path) -> int:
    """One rows file from the shards' (same format; a tool is in one shard,
    so entries never clash, and if they did the last would win as in the
    daemon's cache). Returns the entry count."""
    entries: dict[tuple[str, str], dict] = {}
    for path in files:
        document = json.loads(path.read_text(encoding="utf-8"))
        if document.get("format") != ROWS_FORMAT:
            raise PipelineError(
                f"{path}: request rows of format {document.get('format')!r}, "
                f"this pipeline merges format {ROWS_FORMAT}"
            )
        for entry in document.get("entries", []):
            entries[(entry["content_hash"], entry["model"])] = entry
    merged = sorted(entries.values(), key=lambda e: (e["id"], e["model"]))
    out.write_text(json.dumps({"format": ROWS_FORMAT, "entries": merged}), encoding="utf-8")
    return len(merged)


class Assembly:
    """The driver's side of step 5: a data dir the shards' results are
    unpacked into one by one as they arrive (so the driver never holds
    more than one shard's files in memory), then indexed with the shard
    indexes as vector donors, signed and verified."""

    def __init__(self, work: Path):
        self.shards_dir = work / "shards"
        self.data_dir = work / "assembled"
        for stale in (self.shards_dir, self.data_dir):
            if stale.exists():
                shutil.rmtree(stale)
        (self.data_dir / CRAWLED_DIR).mkdir(parents=True)
        self.donors: list[str] = []
        self.row_files: list[Path] = []

    def add(self, number: int, archive: bytes) -> None:
        """Unpacks one shard: its crawled manifests join the data dir, its
        index becomes a donor, its rows wait for the merge."""
        shard_dir = self.shards_dir / f"shard-{number}"
        shard_dir.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r") as tar:
            tar.extractall(shard_dir, filter="data")
        crawled = shard_dir / CRAWLED_DIR
        if crawled.is_dir():
            for item in crawled.iterdir():
                target = self.data_dir / CRAWLED_DIR / item.name
                if target.exists():
                    raise PipelineError(
                        f"shard {number}: {item.name} was crawled by another shard too"
                    )
                shutil.move(str(item), target)
        if (shard_dir / INDEX_FILE).is_file():
            self.donors.append(str(shard_dir / INDEX_FILE))
        if (shard_dir / ROWS_FILE).is_file():
            self.row_files.append(shard_dir / ROWS_FILE)


def assemble(
    assembly: Assembly,
    oapd: str,
    config: Path | None,
    key: Path,
    public_key: Path,
    out: Path,
    version: int | None,
    threads: int,
) -> dict:
    """Step 5 once every shard is in: index with the shards' vectors as
    donors, sign, verify."""
    data_dir, donors, row_files = assembly.data_dir, assembly.donors, assembly.row_files
    report: dict = {"seconds": {}}
    if row_files:
        report["request_entries"] = merge_rows(row_files, data_dir / ROWS_FILE)
    env = oapd_env(config, data_dir, threads)
    env["OAP_INDEX_VECTOR_DONORS"] = ",".join(donors)
    started = time.monotonic()
    report["index"] = index_counts(run_oapd(oapd, ["index"], env, "assembly: index"))
    report["seconds"]["index"] = time.monotonic() - started
    started = time.monotonic()
    build = ["snapshot", "build", "--key", str(key), "--out", str(out)]
    if version is not None:
        build += ["--version", str(version)]
    report["snapshot"] = run_oapd(oapd, build, env, "assembly: snapshot build").strip()
    report["seconds"]["snapshot"] = time.monotonic() - started
    report["verify"] = run_oapd(
        oapd,
        ["snapshot", "verify", str(out), "--public-key", str(public_key)],
        env,
        "assembly: snapshot verify",
    ).strip()
    report["snapshot_bytes"] = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    return report


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domains", type=Path, required=True, help="domain list, one a line")
    parser.add_argument("--shards", type=int, default=0, help="default: the cluster's CPUs")
    parser.add_argument("--work", type=Path, required=True, help="the driver's work dir")
    parser.add_argument("--oapd", default="oapd", help="the oapd binary on every node")
    parser.add_argument("--config", type=Path, help="oapd configuration (YAML) for every step")
    parser.add_argument("--key", type=Path, required=True, help="snapshot secret key")
    parser.add_argument("--public-key", type=Path, help="default: snapshot.pub beside --key")
    parser.add_argument("--out", type=Path, required=True, help="a new snapshot directory")
    parser.add_argument("--version", type=int, help="snapshot version (default: Unix time)")
    parser.add_argument("--ollama", help="Ollama API for request rows (none: no rows)")
    parser.add_argument("--model", help="the model writing request rows")
    parser.add_argument("--concurrency", type=int, default=1, help="request-row calls in flight per shard")
    parser.add_argument("--cpus-per-task", type=int, default=1, help="CPUs each shard task holds")
    parser.add_argument("--address", help="Ray cluster (default: RAY_ADDRESS, else a local one)")
    parser.add_argument("--report", type=Path, help="also write the JSON summary here")
    args = parser.parse_args(argv)
    if args.ollama and not args.model:
        parser.error("--ollama needs --model")
    if args.out.exists():
        parser.error(f"--out {args.out}: exists; a snapshot goes to a new directory")
    return args


def run(args: argparse.Namespace) -> dict:
    """The whole pipeline on the connected Ray cluster; the summary."""
    oapd = shutil.which(args.oapd) or args.oapd
    config = args.config.resolve() if args.config else None
    config_text = config.read_text(encoding="utf-8") if config else None
    public_key = args.public_key or args.key.with_name("snapshot.pub")
    domains = read_domains(args.domains)
    shards = args.shards or max(1, int(ray.cluster_resources().get("CPU", 1)) // args.cpus_per_task)
    planned = shard(domains, shards)
    task = ray.remote(num_cpus=args.cpus_per_task, max_retries=1)(build_shard)
    started = time.monotonic()
    pending = [
        task.remote(
            number, part, oapd, config_text, args.ollama, args.model,
            args.concurrency, args.cpus_per_task,
        )
        for number, part in enumerate(planned)
    ]
    args.work.mkdir(parents=True, exist_ok=True)
    assembly = Assembly(args.work)
    reports = []
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        result = ray.get(done[0])
        assembly.add(result["report"]["shard"], result["archive"])
        reports.append(result["report"])
        del result, done
    shard_seconds = time.monotonic() - started
    assembled = assemble(
        assembly, oapd, config, args.key, public_key, args.out,
        args.version, args.cpus_per_task,
    )
    reports.sort(key=lambda r: r["shard"])
    return {
        "domains": len(domains),
        "shards": reports,
        "shard_wall_seconds": shard_seconds,
        "nodes": sorted({r["node_id"] for r in reports}),
        "assembly": assembled,
        "snapshot": str(args.out),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    ray.init(address=args.address or os.environ.get("RAY_ADDRESS"), logging_level="WARNING")
    try:
        summary = run(args)
    except (PipelineError, ray.exceptions.RayTaskError) as err:
        print(f"oapd-pipeline: {err}", file=sys.stderr)
        return 1
    finally:
        ray.shutdown()
    text = json.dumps(summary, indent=2)
    if args.report:
        args.report.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
