"""The status page (/ui) in a real headless Chromium, against the real
daemon with a token in front of the scripted fake Ollama: the browser is
asked for the token once (Basic), the page's own requests then carry it,
every section loads without an error in the console, the discovery box and
the capability filter work, and text from manifests stays text.

One browser session serves every test here (it starts in about a second,
but CI time adds up). Screenshots go to target/ui-screenshots/.
"""

import json
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from cdp import CHROMIUM, Browser
from conftest import TARGET, http_json, launch_oapd

TOKEN = "status-page-browser-token-0123456789"
SHOTS = TARGET.parent / "ui-screenshots"
TASK = "how many words are in this sentence"
# A manifest whose text is markup: the page must show it, not run it.
HOSTILE = '<img src="/ui/favicon.svg" id="injected"><b>bold</b> Formats a haiku.'

if not Path(CHROMIUM).is_file():
    message = f"{CHROMIUM} missing: install Debian's chromium (or set OAPD_CHROMIUM)"
    if os.environ.get("OAPD_REQUIRE_BROWSER") == "1":
        raise RuntimeError(message)
    pytest.skip(message, allow_module_level=True)


def status_of(url, path):
    request = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


@pytest.fixture(scope="module")
def daemon(fake):
    manifests = Path(tempfile.mkdtemp())
    (manifests / "haiku.json").write_text(
        json.dumps(
            {
                "oap": "1.0",
                "name": "haiku",
                "description": HOSTILE,
                "input": {"format": "text/plain", "description": "The topic."},
                "output": {"format": "text/plain", "description": "The poem."},
                "invoke": {"method": "stdio", "url": "true"},
            }
        )
    )
    process, url = launch_oapd(
        fake.url,
        extra_config=f"manifests:\n  dirs: [{json.dumps(str(manifests))}]\n",
        server_config=f"  auth_token: {TOKEN}\n",
        token=TOKEN,
    )
    yield url
    process.terminate()
    process.wait(timeout=20)


@pytest.fixture(scope="module")
def has_requests_log(daemon):
    """Whether this oapd answers GET /v1/requests (the page says "not
    available" while it does not)."""
    return status_of(daemon, "/v1/requests") != 404


@pytest.fixture(scope="module")
def page(daemon):
    SHOTS.mkdir(parents=True, exist_ok=True)
    browser = Browser(credentials=("operator", TOKEN), log_path=SHOTS / "chromium.log")
    try:
        browser.open_page()
        browser.navigate(f"{daemon}/ui")
        browser.wait_for("document.body && document.body.dataset.loaded", what="the page's first load")
        yield browser
    finally:
        browser.close()


def errors(browser, has_requests_log):
    """Error-level console messages, exceptions and log entries. While the
    request history does not exist, the browser's own network line for its
    404 is the one expected entry (the page shows "not available")."""
    return [
        e
        for e in browser.errors
        if has_requests_log
        or not (e["kind"] == "log" and e.get("source") == "network" and (e.get("url") or "").endswith("/v1/requests"))
    ]


def visible_rows(browser, table):
    return browser.evaluate(
        f"[...document.querySelectorAll('#{table} tbody tr')].filter(r => !r.hidden)"
        ".map(r => [...r.cells].map(c => c.textContent))"
    )


def test_the_page_asks_for_the_token_once_and_loads_every_section(page, daemon, has_requests_log):
    # One challenge, for the page itself: the script, the stylesheet and
    # every API call after it went with the credentials the browser kept.
    assert len(page.auth_challenges) == 1, page.auth_challenges
    challenge = page.auth_challenges[0]["authChallenge"]
    assert challenge["scheme"].lower() == "basic" and challenge["realm"] == "oapd"
    assert page.auth_challenges[0]["request"]["url"].endswith("/ui")

    assert page.evaluate("document.getElementById('overall').textContent") == "ok"
    health = page.evaluate("document.getElementById('health-list').textContent")
    assert "Manifests served14" in health, health
    assert "Last rebuild" in health and "succeeded" in health, health
    sources = page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('#sources tbody tr')]"
        ".map(r => [r.dataset.source, r.cells[1].textContent]))"
    )
    assert sources == {"bundled": "13", "dir": "1", "crawl": "0", "lan": "0", "snapshot": "0", "mcp": "0"}, sources
    assert "reachable" in page.evaluate("document.getElementById('ollama-state').textContent")
    models = [r[0] for r in visible_rows(page, "models")]
    assert "qwen3:4b" in models, models
    crawl = page.evaluate("document.getElementById('crawl-state').textContent")
    assert "crawler is off" in crawl, crawl
    requests = page.evaluate("document.getElementById('requests-state').textContent")
    if not has_requests_log:
        assert "not available" in requests, requests
    page.screenshot(SHOTS / "loaded.png")
    assert errors(page, has_requests_log) == []


def test_the_discovery_box_finds_the_word_counter(page, has_requests_log):
    page.type_into("#task", TASK)
    page.click("#discover-form button")
    page.wait_for("!document.getElementById('candidates').hidden", what="discovery results")
    verdict = page.evaluate("document.getElementById('discover-verdict').textContent")
    assert verdict.startswith("match") and "(local/wc)" in verdict, verdict
    candidates = visible_rows(page, "candidates")
    assert candidates[0][1] == "local/wc", candidates
    assert float(candidates[0][4]) > float(candidates[-1][4])
    page.screenshot(SHOTS / "discovery.png")
    assert errors(page, has_requests_log) == []


def test_the_capabilities_list_filters_as_the_operator_types(page, has_requests_log):
    every = visible_rows(page, "caps")
    assert len(every) == 14, every
    page.type_into("#cap-filter", "json")
    shown = [r[0] for r in visible_rows(page, "caps")]
    assert "local/jq" in shown and 0 < len(shown) < 14, shown
    count = page.evaluate("document.getElementById('cap-count').textContent")
    assert count == f"{len(shown)} of 14", count
    page.type_into("#cap-filter", "local/grep")
    assert [r[0] for r in visible_rows(page, "caps")] == ["local/grep"]
    page.screenshot(SHOTS / "filtered.png")
    page.evaluate("(() => { const f = document.getElementById('cap-filter'); f.value = '';"
                  " f.dispatchEvent(new Event('input')); })()")
    assert len(visible_rows(page, "caps")) == 14
    assert errors(page, has_requests_log) == []


def test_manifest_text_is_shown_as_text_never_as_markup(page, has_requests_log):
    row = [r for r in visible_rows(page, "caps") if r[0] == "local/haiku"]
    assert row and row[0][2] == HOSTILE, row
    assert page.evaluate("document.querySelectorAll('#injected, main b').length") == 0
    assert errors(page, has_requests_log) == []


def test_a_bridged_chat_appears_in_the_requests_list(page, daemon, fake, has_requests_log):
    if not has_requests_log:
        pytest.skip("GET /v1/requests answers 404: this oapd keeps no request history (the page says not available)")
    fake.turns(
        {"chunks": [{"tool_calls": [{"name": "oap_wc", "arguments": {"args": "-w", "stdin": "one two three"}}]}]},
        {"echo": "last_tool"},
    )
    answer = http_json(
        "POST",
        f"{daemon}/api/chat",
        {"model": "qwen3:4b", "stream": False, "messages": [{"role": "user", "content": "count the words: one two three"}]},
        token=TOKEN,
    )
    assert answer["done"]
    page.click("#refresh")
    page.wait_for(
        "[...document.querySelectorAll('#requests-table tbody tr')].some(r => r.textContent.includes('/api/chat'))",
        what="the chat in the requests list",
    )
    rows = visible_rows(page, "requests-table")
    newest = rows[0]
    assert newest[1] == "/api/chat" and newest[2] == "qwen3:4b", rows
    assert "oap_wc" in newest[6] or "wc" in newest[6], rows
    page.screenshot(SHOTS / "requests.png")
    assert errors(page, has_requests_log) == []
