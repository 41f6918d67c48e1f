"""The official MCP Python SDK against oapd's `/mcp`, as Claude Desktop or
Home Assistant's MCP integration would use it: streamable HTTP, the two meta
tools, a discovered capability run for real (the bundled `wc` manifest runs
coreutils wc)."""

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

# POST /v1/discover matches this task to local/wc on the bundled index.
TASK = "count the words in this paragraph"


def with_session(oapd, steps):
    """Runs `steps(session)` in an initialized session against oapd."""

    async def main():
        async with streamable_http_client(f"{oapd}/mcp") as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                return init, await steps(session)

    return anyio.run(main)


def text_of(result):
    return "\n".join(block.text for block in result.content if block.type == "text")


def test_initialize_lists_the_two_meta_tools(oapd):
    async def steps(session):
        return await session.list_tools()

    init, listed = with_session(oapd, steps)
    assert init.server_info.name == "oapd"
    tools = {tool.name: tool for tool in listed.tools}
    assert sorted(tools) == ["oap_discover", "oap_invoke"]
    assert tools["oap_discover"].input_schema["required"] == ["task"]
    assert tools["oap_discover"].input_schema["properties"]["top_k"]["maximum"] == 20
    assert tools["oap_invoke"].input_schema["properties"]["arguments"]["type"] == "object"


def test_discover_finds_wc_and_invoke_counts(oapd):
    async def steps(session):
        found = await session.call_tool("oap_discover", {"task": TASK, "top_k": 3})
        counted = await session.call_tool(
            "oap_invoke",
            {"tool": "local/wc", "arguments": {"args": "-w", "stdin": "one two three four five six"}},
        )
        return found, counted

    _, (found, counted) = with_session(oapd, steps)
    assert not found.is_error, text_of(found)
    capabilities = found.structured_content["capabilities"]
    wc = next(c for c in capabilities if c["id"] == "local/wc")
    assert found.structured_content["match"] == capabilities[0]["id"]
    assert "stdin" in wc["input_schema"]["properties"]
    assert wc["description"] and wc["score"] > 0
    assert not counted.is_error, text_of(counted)
    assert text_of(counted).strip() == "6"


def test_unknown_capability_is_a_tool_error(oapd):
    async def steps(session):
        return await session.call_tool("oap_invoke", {"tool": "example.org/nothing-here", "arguments": {}})

    _, result = with_session(oapd, steps)
    assert result.is_error
    assert 'no capability with id "example.org/nothing-here"' in text_of(result)


def test_a_task_nothing_fits_gets_an_empty_answer(oapd):
    async def steps(session):
        return await session.call_tool("oap_discover", {"task": "book me a flight to the moon and pay with bitcoin"})

    _, result = with_session(oapd, steps)
    assert not result.is_error, text_of(result)
    assert result.structured_content["match"] is None
    assert result.structured_content["capabilities"] == []
