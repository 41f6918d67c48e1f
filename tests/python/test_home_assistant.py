"""Home Assistant core, the real one from PyPI, talking to oapd as its Ollama.

HA runs headless from its own venv (target/ha-venv, made by `cargo xtask
test`; OAPD_HA_VENV points elsewhere) with a temporary config dir and a
template light. The test onboards it, adds the Ollama integration through
HA's config-flow API pointed at oapd (which stands in front of the scripted
fake Ollama and requires its token of every address, 127.0.0.1 included)
with a base URL that carries a client token of HA's own
(`http://127.0.0.1:<port>/c/<token>`: the integration has no header field),
then through subentry flows two conversation agents with the
Assist API (one with "think" on) and an AI task, and talks to them through
HA's conversation API and its `ai_task.generate_data` service. The model is
scripted; HA's tools, HA's tool loop and oapd's tool (the bundled `wc`) are
real.
"""

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import home_assistant
from conftest import REPO, http_json, launch_fake, launch_oapd
from home_assistant import LIGHT, wait_for

HA_VENV = Path(os.environ.get("OAPD_HA_VENV", REPO / "target" / "ha-venv"))
HASS = HA_VENV / "bin" / "python"
# Not installed in the fake before HA comes: HA's set-up pulls it.
MODEL = "llama3.1:latest"
# Installed, and able to think: the agent with "think" on uses it.
THINKER = "qwen3:8b"
TOKEN = "ha-suite-token-that-home-assistant-never-sends"
# Home Assistant's own token (server.clients): chat and Ollama's routes.
HA_TOKEN = "ha-suite-client-token-in-the-base-url"
CLIENT = "home-assistant"
WC_CALL = {"name": "oap_wc", "arguments": {"args": "-w", "stdin": "one two three four"}}
TURN_ON = {"name": "HassTurnOn", "arguments": {"name": "Kitchen Lights", "domain": ["light"]}}

if not HASS.is_file():
    if os.environ.get("OAPD_REQUIRE_HA") == "1":
        raise RuntimeError(f"{HASS} missing: `cargo xtask test` makes the Home Assistant venv")
    pytest.skip(f"{HASS} missing: `cargo xtask test` makes the Home Assistant venv", allow_module_level=True)


@pytest.fixture(scope="module")
def stack():
    """fake Ollama <- oapd (operator token set, a client token for HA, no
    address trusted) <- Home Assistant, onboarded, with the Ollama
    integration set up through its config flow at the token-prefixed URL
    and, through subentry flows, a conversation agent with the Assist API,
    one more with "think" on, and an AI task. Yields (fake, oapd url, HA,
    entities by role)."""
    fake_process, fake = launch_fake({
        "models": [
            {"name": "qwen3:4b", "capabilities": ["completion", "tools"]},
            {"name": THINKER, "capabilities": ["completion", "tools", "thinking"]},
        ],
        "turns": [],
    })
    processes = [fake_process]
    try:
        oapd_process, oapd = launch_oapd(
            fake.url,
            server_config=f"  auth_token: {TOKEN}\n"
            f"  clients:\n    - {{name: {CLIENT}, token: {HA_TOKEN}, scopes: [chat, passthrough]}}\n",
            token=TOKEN,
        )
        processes.append(oapd_process)
        hass_process, ha, _ = home_assistant.start(HASS)
        processes.append(hass_process)
        entry = home_assistant.add_ollama(ha, f"{oapd}/c/{HA_TOKEN}")
        entities = {
            "agent": home_assistant.add_agent(ha, entry, MODEL, "Ollama"),
            "thinker": home_assistant.add_agent(ha, entry, THINKER, "Ollama thinking", think=True),
            "task": home_assistant.add_agent(ha, entry, MODEL, "Ollama task", kind="ai_task_data"),
        }
        yield fake, oapd, ha, entities
    finally:
        for process in reversed(processes):
            home_assistant.stop(process)


@pytest.fixture
def home(stack):
    fake, oapd, ha, entities = stack
    # Not a reset: that would forget the model HA pulled.
    http_json("DELETE", f"{fake.url}/_fake/requests")
    ha.call("POST", "/api/services/light/turn_off", {"entity_id": LIGHT})
    wait_for("the light to be off", lambda: ha.state(LIGHT) == "off")
    yield fake, ha, entities
    assert http_json("GET", f"{fake.url}/_fake/turns")["remaining"] == 0, "a scripted model turn was not used"


def speech(result):
    return result["response"]["speech"]["plain"]["speech"]


def offered(request):
    return [t["function"]["name"] for t in request.get("tools") or []]


def test_set_up_lists_and_pulls_the_model_through_oapd(stack):
    fake, oapd, ha, entities = stack
    # HA listed the models (config flow, then entry set-up and reloads) and,
    # the model missing, pulled it: all through oapd, with the client token
    # in the base URL, which oapd took off before passing the request on.
    tags = fake.requests("/api/tags")
    assert len(tags) >= 2 and all(r["status"] == 200 for r in tags)
    pulls = fake.requests("/api/pull")
    assert [r["body"]["model"] for r in pulls] == [MODEL]
    assert pulls[0]["status"] == 200
    assert all("authorization" not in r["headers"] for r in tags + pulls)
    assert HA_TOKEN not in json.dumps(http_json("GET", f"{fake.url}/_fake/requests"))
    models = [m["model"] for m in http_json("GET", f"{fake.url}/api/tags")["models"]]
    assert MODEL in models
    # 127.0.0.1 is trusted by nothing: without a token, refused.
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{oapd}/api/tags", timeout=10)
    assert refused.value.code == 401
    # HA's token uses oapd; it does not administer it: registration refuses it.
    register = urllib.request.Request(
        f"{oapd}/c/{HA_TOKEN}/v1/manifests/register",
        data=json.dumps({"url": "http://127.0.0.1:9/.well-known/oap.json"}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(register, timeout=10)
    assert refused.value.code == 403
    # oapd counts HA's requests by its name.
    clients = http_json("GET", f"{oapd}/v1/clients", token=TOKEN)["clients"]
    assert clients[0]["name"] == CLIENT and clients[0]["requests"] >= 3


def test_ha_tool_call_comes_back_to_ha_which_turns_the_light_on(home, stack):
    fake, ha, entities = home
    oapd = stack[1]
    agent = entities["agent"]
    fake.turns({"chunks": [{"tool_calls": [TURN_ON]}]}, {"reply": "The kitchen lights are on."})
    result = ha.process(agent, "turn on the kitchen lights")
    assert speech(result) == "The kitchen lights are on."
    assert ha.state(LIGHT) == "on"
    sent = fake.chat_requests()
    assert len(sent) == 2
    assert "HassTurnOn" in offered(sent[0])
    # HA's second round: its own call and the result of running it.
    follow = sent[1]["messages"]
    assert [c["function"]["name"] for c in follow[-2]["tool_calls"]] == ["HassTurnOn"]
    assert follow[-1]["role"] == "tool"
    assert "Kitchen Lights" in follow[-1]["content"]
    # oapd's record of the chat names HA's client, not its token.
    recent = http_json("GET", f"{oapd}/v1/requests", token=TOKEN)["requests"]
    assert recent and all(r.get("client") == CLIENT for r in recent)


def test_oapd_tool_runs_in_oapd_and_ha_sees_only_the_answer(home):
    fake, ha, entities = home
    agent = entities["agent"]
    fake.turns({"chunks": [{"tool_calls": [WC_CALL]}]}, {"echo": "last_tool"})
    result = ha.process(agent, "count the words in this text: one two three four")
    assert speech(result).strip() == "4"
    sent = fake.chat_requests()
    # Had HA seen oap_wc it would have answered the model "unknown tool"
    # in a third round.
    assert len(sent) == 2
    assert "oap_wc" in offered(sent[0]) and "HassTurnOn" in offered(sent[0])
    assert sent[1]["messages"][-1]["role"] == "tool" and sent[1]["messages"][-1]["content"].strip() == "4"
    assert ha.state(LIGHT) == "off"


def test_mixed_turn_runs_oapds_tool_once_and_ha_runs_its_own(home):
    fake, ha, entities = home
    agent = entities["agent"]
    fake.turns({"chunks": [{"tool_calls": [WC_CALL, TURN_ON]}]}, {"reply": "Four words, and the lights are on."})
    result = ha.process(agent, "count the words in this text: one two three four, and turn on the kitchen lights")
    assert speech(result) == "Four words, and the lights are on."
    assert ha.state(LIGHT) == "on"
    sent = fake.chat_requests()
    assert len(sent) == 2, "oapd ran wc in the first request only"
    follow = sent[1]["messages"]
    calls = [c["function"]["name"] for c in follow[-3]["tool_calls"]]
    assert calls == ["oap_wc", "HassTurnOn"]
    assert follow[-2]["role"] == "tool" and follow[-2]["content"].strip() == "4"
    assert follow[-1]["role"] == "tool" and "Kitchen Lights" in follow[-1]["content"]


def test_think_goes_to_every_round_and_the_thinking_comes_back_to_ha(home):
    fake, ha, entities = home
    fake.turns(
        {"chunks": [{"thinking": "Words first: wc. "}, {"tool_calls": [WC_CALL]}]},
        {"chunks": [{"thinking": "Now the lights. "}, {"tool_calls": [TURN_ON]}]},
        {"chunks": [{"thinking": "Both done. "}, {"content": "Four words, and the lights are on."}]},
    )
    result = ha.process(entities["thinker"], "count the words in this text: one two three four, then turn on the kitchen lights")
    assert speech(result) == "Four words, and the lights are on."
    assert ha.state(LIGHT) == "on"
    sent = fake.chat_requests()
    # oapd's round (wc), the one whose call goes back to HA, and HA's next.
    assert len(sent) == 3
    assert all(r["model"] == THINKER and r["think"] is True for r in sent)
    assert "oap_wc" in offered(sent[0]) and "HassTurnOn" in offered(sent[0])
    # HA kept the thinking that came with its call and sent it back with it.
    follow = sent[2]["messages"]
    assert [c["function"]["name"] for c in follow[-2]["tool_calls"]] == ["HassTurnOn"]
    assert "Now the lights." in follow[-2]["thinking"]
    assert follow[-1]["role"] == "tool" and "Kitchen Lights" in follow[-1]["content"]


def test_ai_task_structure_reaches_the_answering_round_as_format(home):
    fake, ha, entities = home
    fake.turns(
        {"chunks": [{"tool_calls": [WC_CALL]}]},
        # Asked with oapd's tools on offer and no format: dropped, asked again.
        {"reply": "There are four words."},
        {"reply": '{"words": 4}'},
    )
    data = ha.service("ai_task", "generate_data", {
        "task_name": "word count",
        "entity_id": entities["task"],
        "instructions": "count the words in this text: one two three four",
        "structure": {"words": {"description": "How many words", "required": True, "selector": {"number": {}}}},
    })
    assert data["data"] == {"words": 4}
    sent = fake.chat_requests()
    assert len(sent) == 3
    assert "oap_wc" in offered(sent[0])
    assert "format" not in sent[0] and "format" not in sent[1]
    schema = sent[2]["format"]
    assert schema["type"] == "object" and "words" in schema["properties"] and schema["required"] == ["words"]
    # The answering round offers none of oapd's tools (HA's AI task has none).
    assert not offered(sent[2])
    assert sent[2]["messages"][-1]["role"] == "tool" and sent[2]["messages"][-1]["content"].strip() == "4"
    assert ha.state(LIGHT) == "off"
