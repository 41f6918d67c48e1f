"""One Home Assistant voice turn through oapd vs straight to Ollama (the
scripted fake), in the same run: `cargo xtask bench-ha [--runs N]`.

One HA (real core, from target/ha-venv) gets two Ollama config entries,
each with a conversation agent for the same model: one pointed at oapd in
front of the fake, one at the fake itself. A turn is HA's conversation API handling "turn on the kitchen
lights": the model calls HassTurnOn, HA runs it (the light turns on), HA's
second round gets the answer. The two agents take turns (the order
alternating), the light is switched off between turns (not timed), and the
report gives each path's p50 and p90 and what oapd adds.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))

import home_assistant  # noqa: E402
from conftest import launch_fake, launch_oapd  # noqa: E402
from home_assistant import LIGHT, wait_for  # noqa: E402

MODEL = "llama3.1:latest"
TURN_ON = {"name": "HassTurnOn", "arguments": {"name": "Kitchen Lights", "domain": ["light"]}}
ANSWER = "The kitchen lights are on."


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def turn(ha, agent):
    ha.call("POST", "/api/services/light/turn_off", {"entity_id": LIGHT})
    wait_for("the light to be off", lambda: ha.state(LIGHT) == "off")
    started = time.perf_counter()
    result = ha.process(agent, "turn on the kitchen lights")
    elapsed = time.perf_counter() - started
    speech = result["response"]["speech"]["plain"]["speech"]
    assert speech == ANSWER, result
    assert ha.state(LIGHT) == "on"
    return elapsed * 1000


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    hass = Path(os.environ.get("OAPD_HA_VENV", REPO / "target" / "ha-venv")) / "bin" / "python"
    processes = []
    try:
        fake_process, fake = launch_fake({
            "models": [{"name": MODEL, "capabilities": ["completion", "tools"]}],
            # Every turn: the model calls HA's tool, then answers its result.
            "default_turn": {"chunks": [{"tool_calls": [TURN_ON]}]},
            "after_tool_turn": {"reply": ANSWER},
        })
        processes.append(fake_process)
        oapd_process, oapd = launch_oapd(fake.url)
        processes.append(oapd_process)
        hass_process, ha, _ = home_assistant.start(hass)
        processes.append(hass_process)
        paths = {
            name: home_assistant.add_agent(ha, home_assistant.add_ollama(ha, url), MODEL, name)
            for name, url in (("through oapd", oapd), ("direct to the fake", fake.url))
        }
        for _ in range(args.warmup):
            for agent in paths.values():
                turn(ha, agent)
        times = {name: [] for name in paths}
        for i in range(args.runs):
            order = list(paths) if i % 2 == 0 else list(reversed(paths))
            for name in order:
                times[name].append(turn(ha, paths[name]))
    finally:
        for process in reversed(processes):
            home_assistant.stop(process)
    report = {
        "runs": args.runs,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
        "paths": {
            name: {
                "p50_ms": round(statistics.median(values), 1),
                "p90_ms": round(percentile(values, 0.9), 1),
                "min_ms": round(min(values), 1),
            }
            for name, values in times.items()
        },
    }
    added = report["paths"]["through oapd"]["p50_ms"] - report["paths"]["direct to the fake"]["p50_ms"]
    report["oapd_adds_p50_ms"] = round(added, 1)
    print(f"| path | p50 ms | p90 ms | min ms |  ({args.runs} turns each, interleaved)")
    print("| --- | ---: | ---: | ---: |")
    for name, figures in report["paths"].items():
        print(f"| {name} | {figures['p50_ms']} | {figures['p90_ms']} | {figures['min_ms']} |")
    print(f"oapd adds {added:.1f} ms at p50")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
