#!/usr/bin/env python3
"""A long fuzz campaign: every named target until it has had GOAL seconds of CPU.

    python3 fuzz/campaign.py [--goal 3660] [--slots 2] [--chunk 600]
                             [--bins DIR] [--dir DIR] [TARGET ...]

Runs the targets `cargo xtask fuzz` builds (build them first with
`cargo xtask fuzz TARGET... --seconds 1`) with the same arguments, SLOTS
processes at a time, each in the idle scheduling class (`chrt -i 0`) so that
builds, tests and benchmarks on the same machine are not slowed. A process
runs for at most CHUNK seconds of wall time, then the next target in need
takes its slot (a target takes a second slot when no other needs one);
the CPU time of each process (user + system, from its rusage) is added to its target in DIR/campaign.json (DIR: target/fuzz
unless --dir names another, which then holds the corpus, artifacts and
logs too), with the
executions and the last coverage, features and corpus size libFuzzer
printed. The campaign can be stopped at any time and resumed: `touch
DIR/campaign.PAUSE` interrupts the running processes (their CPU
time is recorded) and ends the run.

A target whose process fails (a crash, a timeout, an out-of-memory: any
exit but success or an interrupt) is stopped and listed with its crashing
input in DIR/artifacts/TARGET/; the others go on.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FUZZ = ROOT / "target" / "fuzz"
BINS = FUZZ / "x86_64-unknown-linux-gnu" / "release"
ALL = [
    "manifest", "arguments", "ndjson", "tool_calls", "sse_stream", "openai_request",
    "index_reader", "envelope", "crawl", "exec_input", "mcp", "query", "config",
]
# libFuzzer's exit status after SIGINT/SIGTERM (-interrupted_exitcode).
INTERRUPTED = 72


def load_state():
    state_file = FUZZ / "campaign.json"
    if state_file.is_file():
        return json.loads(state_file.read_text())
    return {}


def save_state(state):
    tmp = FUZZ / "campaign.tmp"
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
    tmp.replace(FUZZ / "campaign.json")


def command(target, seconds):
    corpus = FUZZ / "corpus" / target
    artifacts = FUZZ / "artifacts" / target
    for d in (corpus, artifacts, FUZZ / "logs"):
        d.mkdir(parents=True, exist_ok=True)
    cmd = [
        "chrt", "-i", "0", str(BINS / target), str(corpus),
        f"-max_total_time={seconds}",
        f"-artifact_prefix={artifacts}/",
        "-print_final_stats=1", "-timeout=10", "-rss_limit_mb=2048", "-max_len=65536",
    ]
    dictionary = ROOT / "fuzz" / "dicts" / f"{target}.dict"
    if dictionary.is_file():
        cmd.append(f"-dict={dictionary}")
    seeds = ROOT / "fuzz" / "seeds" / target
    if seeds.is_dir():
        cmd.append(str(seeds))
    return cmd


def read_stats(log_text):
    """Executions and the last cov / ft / corpus libFuzzer printed."""
    stats = {}
    m = re.findall(r"stat::number_of_executed_units: (\d+)", log_text)
    if m:
        stats["execs"] = int(m[-1])
    else:
        runs = re.findall(r"^#(\d+)\s", log_text, re.M)
        if runs:
            stats["execs"] = int(runs[-1])
    for key, pattern in (("cov", r"cov: (\d+)"), ("ft", r"ft: (\d+)"), ("corpus", r"corp: (\d+)")):
        found = re.findall(pattern, log_text)
        if found:
            stats[key] = int(found[-1])
    return stats


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--goal", type=int, default=3660, help="CPU seconds per target")
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=600, help="wall seconds per process")
    parser.add_argument("--bins", type=Path, help="the built targets (default: xtask's)")
    parser.add_argument("--dir", type=Path, help="state, corpus, artifacts, logs (default target/fuzz)")
    parser.add_argument("targets", nargs="*", default=ALL)
    args = parser.parse_args()
    global FUZZ, BINS
    if args.bins:
        BINS = args.bins.resolve()
    if args.dir:
        FUZZ = args.dir.resolve()
    pause = FUZZ / "campaign.PAUSE"
    unknown = [t for t in args.targets if t not in ALL]
    if unknown:
        sys.exit(f"unknown fuzz target(s) {unknown}; targets: {' '.join(ALL)}")
    missing = [t for t in args.targets if not (BINS / t).is_file()]
    if missing:
        sys.exit(f"not built: {missing}; build with `cargo xtask fuzz {' '.join(missing)} --seconds 1`")
    FUZZ.mkdir(parents=True, exist_ok=True)
    pause.unlink(missing_ok=True)
    state = load_state()
    running = {}  # pid -> (target, Popen, started, log path)

    def needs_time(t):
        entry = state.get(t, {})
        return not entry.get("failed") and entry.get("cpu", 0.0) < args.goal

    def start_next():
        busy = [t for t, *_ in running.values()]
        # A target already running takes a second slot only when no other
        # target needs one: its processes share the corpus directory, and
        # each one's CPU is counted from its own rusage.
        waiting = [t for t in args.targets if t not in busy and needs_time(t)]
        waiting += [t for t in args.targets if t in busy and needs_time(t)]
        for t in waiting:
            left = args.goal - state.get(t, {}).get("cpu", 0.0)
            # A process already running for this target will count its share.
            left = left / (busy.count(t) + 1)
            seconds = max(10, min(args.chunk, int(left) + 5))
            cmd = command(t, seconds)
            log = FUZZ / "logs" / f"campaign-{t}-{time.time_ns()}.log"
            with open(log, "wb") as out:
                proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            running[proc.pid] = (t, proc, time.monotonic(), log, seconds)
            print(f"{time.strftime('%H:%M:%S')} start {t} for {seconds} s (pid {proc.pid})", flush=True)
            return True
        return False

    while True:
        if pause.exists():
            # os.kill, not Popen.send_signal: that polls first, and a poll
            # reaps the child, whose rusage would then be lost.
            for pid in running:
                os.kill(pid, signal.SIGINT)
        else:
            while len(running) < args.slots and start_next():
                pass
        if not running:
            break
        # Reap whatever ends; a process that outlives its time by a minute
        # (libFuzzer has been seen to hang in its exit) is killed.
        pid, status, usage = os.wait4(-1, os.WNOHANG)
        if pid == 0:
            now = time.monotonic()
            for pid, (_, _, started, _, seconds) in running.items():
                if now - started > seconds + 60:
                    os.kill(pid, signal.SIGKILL)
            time.sleep(1)
            continue
        if pid not in running:
            continue
        t, proc, started, log, _ = running.pop(pid)
        proc.returncode = os.waitstatus_to_exitcode(status)
        cpu = usage.ru_utime + usage.ru_stime
        text = log.read_text(errors="replace")
        stats = read_stats(text)
        entry = state.setdefault(t, {"cpu": 0.0, "execs": 0, "crashes": 0})
        entry["cpu"] = round(entry.get("cpu", 0.0) + cpu, 1)
        entry["execs"] = entry.get("execs", 0) + stats.get("execs", 0)
        for key in ("cov", "ft", "corpus"):
            if key in stats:
                entry[key] = stats[key]
        code = proc.returncode
        if code not in (0, INTERRUPTED) and not (code == -signal.SIGKILL and "stat::" in text):
            entry["crashes"] = entry.get("crashes", 0) + 1
            entry["failed"] = f"exit {code}, log {log}"
        save_state(state)
        print(f"{time.strftime('%H:%M:%S')} end {t}: exit {code}, cpu +{cpu:.0f} s "
              f"= {entry['cpu']:.0f} s, {stats}", flush=True)

    print(json.dumps(state, indent=1, sort_keys=True))
    failed = [t for t in args.targets if state.get(t, {}).get("failed")]
    if failed:
        sys.exit(f"failed: {failed}")


if __name__ == "__main__":
    main()
