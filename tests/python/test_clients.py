"""The `ollama` and `openai` Python packages against oapd, exactly as apps
use them against Ollama. The model is scripted; the tools are real (the
bundled `wc` manifest runs coreutils wc)."""

import json
import os
import re
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import ollama
import openai
import pytest

from conftest import REPO, http_json, launch_oapd

TASK = "count the words in this text: one two three four"
WC_CALL = {"name": "oap_wc", "arguments": {"args": "-w", "stdin": "one two three four"}}
ECHO_TOOL = {"echo": "last_tool"}


def test_ollama_chat_runs_a_discovered_tool(oapd, fake):
    fake.turns({"chunks": [{"tool_calls": [WC_CALL]}]}, ECHO_TOOL)
    client = ollama.Client(host=oapd)
    response = client.chat(model="qwen3:4b", messages=[{"role": "user", "content": TASK}], stream=False)
    assert response.done
    assert "4" in response.message.content
    assert not response.message.tool_calls
    sent = fake.chat_requests()
    assert [t["function"]["name"] for t in sent[0]["tools"]].count("oap_wc") == 1
    assert sent[1]["messages"][-1]["role"] == "tool"


def test_ollama_chat_streams_with_one_final_done(oapd, fake):
    fake.turns({"chunks": [{"content": "Counting. "}, {"tool_calls": [WC_CALL]}]}, ECHO_TOOL)
    client = ollama.Client(host=oapd)
    parts = list(client.chat(model="qwen3:4b", messages=[{"role": "user", "content": TASK}], stream=True))
    assert [p.done for p in parts].count(True) == 1 and parts[-1].done
    text = "".join(p.message.content or "" for p in parts)
    assert text.startswith("Counting.") and "4" in text


def test_ollama_stream_survives_a_slow_first_tool_round(oapd, fake):
    # The model takes 2.5 s per round (a board loading it from an SD card);
    # oapd runs its own tool in between and sends keep-alive chunks (empty
    # assistant deltas) that the real client must take in its stride.
    fake.turns(
        {"chunks": [{"tool_calls": [WC_CALL]}], "response_delay_ms": 2500},
        {"echo": "last_tool", "response_delay_ms": 2500},
    )
    client = ollama.Client(host=oapd)
    parts = list(client.chat(model="qwen3:4b", messages=[{"role": "user", "content": TASK}], stream=True))
    keepalives = [p for p in parts if not p.done and not p.message.content and not p.message.tool_calls]
    assert len(keepalives) >= 2
    assert "4" in "".join(p.message.content or "" for p in parts)
    assert parts[-1].done and not any(p.message.tool_calls for p in parts)


def test_ollama_client_tools_come_back_to_the_client(oapd, fake):
    fake.turns({"chunks": [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}]})

    def get_weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
          city: The city name
        """
        return "sunny"

    client = ollama.Client(host=oapd)
    response = client.chat(
        model="qwen3:4b", messages=[{"role": "user", "content": "weather in Paris?"}], tools=[get_weather], stream=False
    )
    calls = response.message.tool_calls
    assert len(calls) == 1
    assert calls[0].function.name == "get_weather"
    assert calls[0].function.arguments == {"city": "Paris"}


def test_ollama_model_management_passes_through(oapd, fake):
    client = ollama.Client(host=oapd)
    names = [m.model for m in client.list().models]
    assert "qwen3:4b" in names
    assert "tools" in client.show("qwen3:4b").capabilities
    progress = list(client.pull("qwen3:4b", stream=True))
    assert progress[-1].status == "success"


def test_ollama_errors_raise_response_error(oapd, fake):
    fake.turns({"http_error": {"status": 500, "error": "out of memory"}})
    client = ollama.Client(host=oapd)
    with pytest.raises(ollama.ResponseError) as raised:
        client.chat(model="qwen3:4b", messages=[{"role": "user", "content": "hi"}], stream=False)
    assert "out of memory" in str(raised.value)


def test_openai_chat_completion_runs_a_discovered_tool(oapd, fake):
    fake.turns({"chunks": [{"tool_calls": [WC_CALL]}]}, ECHO_TOOL)
    client = openai.OpenAI(base_url=f"{oapd}/v1", api_key="unused")
    completion = client.chat.completions.create(model="qwen3:4b", messages=[{"role": "user", "content": TASK}])
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    assert "4" in choice.message.content


def test_openai_streaming_and_client_tool_calls(oapd, fake):
    fake.turns({"chunks": [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}]})
    client = openai.OpenAI(base_url=f"{oapd}/v1", api_key="unused")
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    stream = client.chat.completions.create(
        model="qwen3:4b", messages=[{"role": "user", "content": "weather in Paris?"}], tools=tools, stream=True
    )
    chunks = list(stream)
    calls = [c for chunk in chunks for choice in chunk.choices for c in (choice.delta.tool_calls or [])]
    assert len(calls) == 1
    assert calls[0].index == 0 and calls[0].function.name == "get_weather"
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    reasons = [choice.finish_reason for chunk in chunks for choice in chunk.choices if choice.finish_reason]
    assert reasons == ["tool_calls"]


def test_openai_streamed_answer_after_a_tool_round(oapd, fake):
    fake.turns({"chunks": [{"tool_calls": [WC_CALL]}]}, ECHO_TOOL)
    client = openai.OpenAI(base_url=f"{oapd}/v1", api_key="unused")
    stream = client.chat.completions.create(model="qwen3:4b", messages=[{"role": "user", "content": TASK}], stream=True)
    text = "".join(choice.delta.content or "" for chunk in stream for choice in chunk.choices)
    assert "4" in text


def test_openai_stream_survives_a_slow_first_tool_round(oapd, fake):
    fake.turns(
        {"chunks": [{"tool_calls": [WC_CALL]}], "response_delay_ms": 2500},
        {"echo": "last_tool", "response_delay_ms": 2500},
    )
    client = openai.OpenAI(base_url=f"{oapd}/v1", api_key="unused")
    stream = client.chat.completions.create(model="qwen3:4b", messages=[{"role": "user", "content": TASK}], stream=True)
    text = "".join(choice.delta.content or "" for chunk in stream for choice in chunk.choices)
    assert "4" in text


WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME_TOOL = {"type": "function", "function": {"name": "get_time", "description": "The time in a city",
             "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


def offered(request):
    return [t["function"]["name"] for t in request.get("tools") or []]


def test_openai_tool_choice_none_offers_no_tool(oapd, fake):
    fake.turns({"chunks": [{"content": "Just text."}]})
    client = openai.OpenAI(base_url=f"{oapd}/v1", api_key="unused")
    completion = client.chat.completions.create(
        model="qwen3:4b", messages=[{"role": "user", "content": TASK}], tools=[WEATHER_TOOL], tool_choice="none"
    )
    assert completion.choices[0].message.content == "Just text."
    assert offered(fake.chat_requests()[0]) == []


def test_openai_tool_choice_names_one_function(oapd, fake):
    fake.turns({"chunks": [{"tool_calls": [{"name": "get_time", "arguments": {"city": "Oslo"}}]}]})
    client = openai.OpenAI(base_url=f"{oapd}/v1", api_key="unused")
    completion = client.chat.completions.create(
        model="qwen3:4b", messages=[{"role": "user", "content": TASK}], tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls[0].function.name == "get_time"
    sent = fake.chat_requests()[0]
    assert offered(sent) == ["get_time"]
    assert any(m["role"] == "system" and "get_time" in m["content"] for m in sent["messages"])
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model="qwen3:4b", messages=[{"role": "user", "content": "x"}], tools=[WEATHER_TOOL],
            tool_choice={"type": "function", "function": {"name": "nope"}},
        )
    assert "nope" in str(raised.value)


def test_openai_legacy_functions_and_function_call(oapd, fake):
    fake.turns({"chunks": [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}]})
    client = openai.OpenAI(base_url=f"{oapd}/v1", api_key="unused")
    completion = client.chat.completions.create(
        model="qwen3:4b", messages=[{"role": "user", "content": "weather in Paris?"}],
        functions=[WEATHER_TOOL["function"]], function_call="auto",
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "function_call"
    assert choice.message.function_call.name == "get_weather"
    assert json.loads(choice.message.function_call.arguments) == {"city": "Paris"}
    assert "get_weather" in offered(fake.chat_requests()[0])
    # The function's result goes back in the legacy shape and reaches the model as a tool result.
    fake.reset()
    fake.turns({"echo": "last_tool"})
    stream = client.chat.completions.create(
        model="qwen3:4b",
        messages=[{"role": "user", "content": "weather in Paris?"},
                  {"role": "assistant", "content": None, "function_call": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
                  {"role": "function", "name": "get_weather", "content": "sunny, 21 C"}],
        functions=[WEATHER_TOOL["function"]], stream=True,
    )
    text = "".join(choice.delta.content or "" for chunk in stream for choice in chunk.choices)
    assert text == "sunny, 21 C"
    last = fake.chat_requests()[0]["messages"][-1]
    assert last["role"] == "tool" and last["tool_name"] == "get_weather"


def test_openai_completion_carries_the_bridge_figures(oapd, fake):
    fake.turns({"chunks": [{"tool_calls": [WC_CALL]}]}, ECHO_TOOL)
    client = openai.OpenAI(base_url=f"{oapd}/v1", api_key="unused")
    completion = client.chat.completions.create(model="qwen3:4b", messages=[{"role": "user", "content": TASK}])
    extra = completion.model_extra
    assert extra["oap_round"] == 2
    assert extra["oap_tools_injected"] >= 1


def test_openai_models_and_errors(oapd, fake):
    client = openai.OpenAI(base_url=f"{oapd}/v1", api_key="unused")
    assert "qwen3:4b" in [m.id for m in client.models.list().data]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="qwen3:4b", messages=[])


def test_openai_responses_api_runs_a_discovered_tool(oapd, fake):
    fake.turns({"chunks": [{"tool_calls": [WC_CALL]}]}, ECHO_TOOL)
    client = openai.OpenAI(base_url=f"{oapd}/v1", api_key="unused")
    response = client.responses.create(model="qwen3:4b", input=TASK, instructions="Be brief.")
    assert response.status == "completed"
    assert "4" in response.output_text
    assert response.usage.total_tokens > 0
    assert fake.chat_requests()[0]["messages"][0] == {"role": "system", "content": "Be brief."}


def test_openai_responses_api_streams_and_hands_back_function_calls(oapd, fake):
    fake.turns({"chunks": [{"content": "Checking. "}, {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}]})
    client = openai.OpenAI(base_url=f"{oapd}/v1", api_key="unused")
    tools = [{"type": "function", "name": "get_weather", "description": "Weather for a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
    events = list(client.responses.create(model="qwen3:4b", input="weather in Paris?", tools=tools, stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Checking. "
    final = events[-1].response
    calls = [item for item in final.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert json.loads(calls[0].arguments) == {"city": "Paris"}

    # The client returns the output; the model continues.
    fake.turns({"echo": "last_tool"})
    follow = client.responses.create(model="qwen3:4b", tools=tools, input=[
        {"role": "user", "content": "weather in Paris?"},
        {"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather", "arguments": calls[0].arguments},
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"},
    ])
    assert follow.output_text == "sunny"


def test_openai_responses_api_errors(oapd, fake):
    client = openai.OpenAI(base_url=f"{oapd}/v1", api_key="unused")
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model="qwen3:4b", input="hi", tools=[{"type": "web_search"}])
    assert "function tools" in str(raised.value)


def weather_call(city):
    return {"name": "get_weather", "arguments": {"city": city}}


def test_ollama_mixed_turn_keeps_oapds_result_in_the_clients_history(oapd, fake):
    # One turn calls oapd's wc and the app's get_weather; the app keeps its
    # own history (the message objects the client returns) and sends its
    # result back. The model must then see wc's result without wc running
    # a second time.
    fake.turns({"chunks": [{"tool_calls": [WC_CALL, weather_call("Paris")]}]}, {"reply": "Four words, sunny."})
    client = ollama.Client(host=oapd)
    messages = [{"role": "user", "content": TASK + " and tell me the weather in Paris"}]
    response = client.chat(model="qwen3:4b", messages=messages, tools=[WEATHER_TOOL], stream=False)
    assert [c.function.name for c in response.message.tool_calls] == ["get_weather"]
    messages.append(response.message)
    messages.append({"role": "tool", "content": "sunny", "tool_name": "get_weather"})
    final = client.chat(model="qwen3:4b", messages=messages, tools=[WEATHER_TOOL], stream=False)
    assert final.message.content == "Four words, sunny."
    sent = fake.chat_requests()
    assert len(sent) == 2, "oapd ran wc in the first request only"
    follow = sent[1]["messages"]
    assert [c["function"]["name"] for c in follow[1]["tool_calls"]] == ["oap_wc", "get_weather"]
    assert follow[2]["role"] == "tool" and follow[2]["tool_name"] == "oap_wc"
    assert follow[2]["content"].strip() == "4"
    assert follow[3] == {"role": "tool", "content": "sunny", "tool_name": "get_weather"}


def test_openai_mixed_turn_keeps_oapds_result_in_the_clients_history(oapd, fake):
    fake.turns({"chunks": [{"tool_calls": [WC_CALL, weather_call("Paris")]}]}, {"reply": "Four words, cold."})
    client = openai.OpenAI(base_url=f"{oapd}/v1", api_key="unused")
    messages = [{"role": "system", "content": "You answer for the OpenAI app."},
                {"role": "user", "content": TASK + " and tell me the weather in Paris"}]
    completion = client.chat.completions.create(model="qwen3:4b", messages=messages, tools=[WEATHER_TOOL])
    message = completion.choices[0].message
    assert [c.function.name for c in message.tool_calls] == ["get_weather"]
    messages.append(message)
    messages.append({"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "cold"})
    final = client.chat.completions.create(model="qwen3:4b", messages=messages, tools=[WEATHER_TOOL])
    assert final.choices[0].message.content == "Four words, cold."
    sent = fake.chat_requests()
    assert len(sent) == 2
    follow = sent[1]["messages"][1:]
    assert [c["function"]["name"] for c in follow[1]["tool_calls"]] == ["oap_wc", "get_weather"]
    assert follow[2]["tool_name"] == "oap_wc" and follow[2]["content"].strip() == "4"
    assert follow[3]["content"] == "cold"


def test_ollama_stream_never_shows_a_call_a_small_model_printed(oapd, fake):
    # gemma3 prints its call as JSON text instead of making it; oapd runs it
    # and the app's stream shows only the answer.
    printed = json.dumps({"name": "oap_wc", "parameters": WC_CALL["arguments"]})
    pieces = ["```json\n", printed[:20], printed[20:], "\n```"]
    fake.turns({"chunks": [{"content": p} for p in pieces]}, ECHO_TOOL)
    client = ollama.Client(host=oapd)
    parts = list(client.chat(model="gemma3:1b", messages=[{"role": "user", "content": TASK}], stream=True))
    text = "".join(p.message.content or "" for p in parts)
    assert text.strip() == "4"
    assert parts[-1].done and [p.done for p in parts].count(True) == 1
    sent = fake.chat_requests()
    assert sent[1]["messages"][-2]["tool_calls"][0]["function"]["name"] == "oap_wc"
    assert sent[1]["messages"][-2]["content"] == ""


def test_openai_json_format_goes_only_to_the_answering_round(oapd, fake):
    fake.turns({"chunks": [{"tool_calls": [WC_CALL]}]}, {"reply": "four words"}, {"reply": '{"words": 4}'})
    client = openai.OpenAI(base_url=f"{oapd}/v1", api_key="unused")
    completion = client.chat.completions.create(
        model="qwen3:4b", messages=[{"role": "user", "content": TASK}], response_format={"type": "json_object"}
    )
    assert json.loads(completion.choices[0].message.content) == {"words": 4}
    sent = fake.chat_requests()
    assert len(sent) == 3
    assert "format" not in sent[0] and "format" not in sent[1]
    assert sent[2]["format"] == "json" and not offered(sent[2])


def test_openai_embeddings_and_completions_pass_through(oapd, fake):
    client = openai.OpenAI(base_url=f"{oapd}/v1", api_key="unused")
    # The client asks for base64 by default and decodes it to floats.
    embedded = client.embeddings.create(model="qwen3:4b", input=["one", "two"])
    assert [e.index for e in embedded.data] == [0, 1]
    assert len(embedded.data[0].embedding) > 1
    assert all(isinstance(v, float) for v in embedded.data[0].embedding)
    floats = client.embeddings.create(model="qwen3:4b", input="one", encoding_format="float")
    assert floats.data[0].embedding == pytest.approx(embedded.data[0].embedding, rel=1e-6)
    completion = client.completions.create(model="qwen3:4b", prompt="Say something")
    assert completion.object == "text_completion"
    assert completion.choices[0].text == "This is a fake generation."
    streamed = client.completions.create(model="qwen3:4b", prompt="Say something", stream=True)
    assert "".join(c.choices[0].text for c in streamed) == "This is a fake generation."
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="missing", input="one")


def test_ollama_embed_and_generate_pass_through(oapd, fake):
    client = ollama.Client(host=oapd)
    assert len(client.embed(model="qwen3:4b", input=["one", "two"]).embeddings) == 2
    assert client.generate(model="qwen3:4b", prompt="Say something").response == "This is a fake generation."


def test_ollama_think_and_format_the_way_home_assistant_sends_them(oapd, fake):
    # Home Assistant's Ollama integration (its agents' "think" option, its
    # AI tasks' structured output) calls the same client this way: its own
    # tools, stream, keep_alive in seconds, num_ctx, think and a JSON schema
    # as format. (test_home_assistant.py sends both from HA itself.)
    schema = {"type": "object", "properties": {"words": {"type": "integer"}}, "required": ["words"]}
    fake.turns(
        {"chunks": [{"thinking": "Counting needs wc. "}, {"tool_calls": [WC_CALL]}]},
        {"chunks": [{"thinking": "wc said 4. "}, {"content": "four words"}]},
        {"chunks": [{"thinking": "As JSON. "}, {"content": '{"words": 4}'}]},
    )
    client = ollama.Client(host=oapd)
    parts = list(client.chat(
        model="qwen3:8b", messages=[{"role": "user", "content": TASK}], tools=[WEATHER_TOOL], stream=True,
        keep_alive="-1s", options={"num_ctx": 8192}, think=True, format=schema,
    ))
    thinking = "".join(p.message.thinking or "" for p in parts)
    assert "As JSON." in thinking
    assert json.loads("".join(p.message.content or "" for p in parts)) == {"words": 4}
    assert not any(p.message.tool_calls for p in parts)
    sent = fake.chat_requests()
    assert len(sent) == 3
    assert all(r["think"] is True for r in sent)
    assert all(r["options"]["num_ctx"] == 8192 for r in sent)
    # format only where the model answers without oapd's tools on offer.
    assert "format" not in sent[0] and "format" not in sent[1]
    assert sent[2]["format"] == schema
    # The thinking of the call stays with it in the next round.
    assert sent[1]["messages"][-2]["thinking"] == "Counting needs wc. "


# ---- a client token in the base URL (server.clients) ----------------------

OPERATOR_TOKEN = "clients-suite-operator-token-0123456789"
CLIENT_TOKEN = "ha-client-token-0123456789abcdef"
HA_PYTHON = Path(os.environ.get("OAPD_HA_VENV", REPO / "target" / "ha-venv")) / "bin" / "python"


@pytest.fixture(scope="module")
def guarded(fake):
    """oapd with the operator's token and a client token for Home Assistant;
    127.0.0.1 is not trusted, so every request needs one of them."""
    process, url = launch_oapd(
        fake.url,
        server_config=f"  auth_token: {OPERATOR_TOKEN}\n"
        f"  clients:\n    - {{name: home-assistant, token: {CLIENT_TOKEN}, scopes: [chat, passthrough]}}\n",
        token=OPERATOR_TOKEN,
    )
    yield url
    process.terminate()
    process.wait(timeout=20)


def no_token_upstream(fake):
    everything = json.dumps(http_json("GET", f"{fake.url}/_fake/requests"))
    assert CLIENT_TOKEN not in everything and OPERATOR_TOKEN not in everything


def test_ollama_client_carries_a_client_token_in_its_base_url(guarded, fake):
    fake.turns({"chunks": [{"tool_calls": [WC_CALL]}]}, ECHO_TOOL)
    client = ollama.Client(host=f"{guarded}/c/{CLIENT_TOKEN}")
    assert "qwen3:4b" in [m.model for m in client.list().models]
    assert "tools" in client.show("qwen3:4b").capabilities
    parts = list(client.chat(model="qwen3:4b", messages=[{"role": "user", "content": TASK}], stream=True))
    assert "4" in "".join(p.message.content or "" for p in parts)
    assert list(client.pull("qwen3:4b", stream=True))[-1].status == "success"
    assert fake.requests("/api/tags") and fake.requests("/api/pull")
    no_token_upstream(fake)
    # Without it the same client is refused; with a wrong one, told so.
    with pytest.raises(ollama.ResponseError) as refused:
        ollama.Client(host=guarded).list()
    assert refused.value.status_code == 401
    with pytest.raises(ollama.ResponseError) as refused:
        ollama.Client(host=f"{guarded}/c/not-the-token-0123456789").list()
    assert refused.value.status_code == 401 and "/c/<token>" in str(refused.value)
    # The client token registers nothing: that is the operator's.
    request = urllib.request.Request(
        f"{guarded}/c/{CLIENT_TOKEN}/v1/manifests/register",
        data=json.dumps({"url": "http://127.0.0.1:9/.well-known/oap.json"}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 403
    # The chat's record names the client.
    recent = http_json("GET", f"{guarded}/v1/requests", token=OPERATOR_TOKEN)["requests"]
    assert recent and all(r.get("client") == "home-assistant" for r in recent)
    assert CLIENT_TOKEN not in json.dumps(recent)


# Home Assistant's own calls, with the `ollama` package at the version HA
# pins and HA's URL check, in HA's venv: the config flow's URL validation,
# then list (config flow and set-up), pull (a missing model) and a
# streamed chat (its agents), all under the token-prefixed base URL.
HA_CALLS = r"""
import asyncio, json, sys
from importlib.metadata import version
import ollama
from ollama._client import _parse_host
from homeassistant.helpers import config_validation as cv

url = cv.url(sys.argv[1])

async def main():
    client = ollama.AsyncClient(host=url)
    models = [m.model for m in (await client.list()).models]
    pulled = [p.status async for p in await client.pull("qwen3:4b", stream=True)]
    parts = [p async for p in await client.chat(
        model="qwen3:4b", messages=[{"role": "user", "content": "hi"}], stream=True, keep_alive="-1s")]
    print(json.dumps({
        "version": version("ollama"),
        "url": url,
        "models": models,
        "pulled": pulled[-1],
        "text": "".join(p.message.content or "" for p in parts),
        "userinfo_kept": "@" in _parse_host("http://ha:secret@127.0.0.1:8300"),
    }))

asyncio.run(main())
"""


@pytest.mark.skipif(not HA_PYTHON.is_file(), reason="target/ha-venv missing: `cargo xtask test` makes it")
def test_home_assistants_pinned_ollama_client_keeps_the_prefix_on_every_call(guarded, fake):
    fake.turns({"chunks": [{"content": "Hello "}, {"content": "from the board."}]})
    base = f"{guarded}/c/{CLIENT_TOKEN}"
    done = subprocess.run([str(HA_PYTHON), "-c", HA_CALLS, base], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    pin = re.search(r"^ollama==(\S+)", (REPO / "tests/python/home-assistant.txt").read_text(), re.M).group(1)
    assert seen["version"] == pin
    assert seen["url"] == base
    assert "qwen3:4b" in seen["models"]
    assert seen["pulled"] == "success"
    assert seen["text"] == "Hello from the board."
    # Why the token goes in the path: the client drops a URL's user info.
    assert seen["userinfo_kept"] is False
    assert fake.requests("/api/tags") and fake.requests("/api/pull") and fake.requests("/api/chat")
    no_token_upstream(fake)
