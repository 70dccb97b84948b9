"""The HTTP API against a real daemon and a real uvicorn server on 127.0.0.1 (port 0)."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from homeagent.cli.client import Client
from homeagent.daemon import Daemon
from homeagent.webui import WebUIError, start_webui
from homeagent.webui.auth import LoginLimiter
from tests.conftest import run_cli
from tests.fakes.webui_fixtures import Web, add_sleep_tool, start_web


async def read_sse(response: httpx.Response, *, until: str = "response", limit: int = 10_000) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            frames.append(json.loads(line[5:]))
            if frames[-1].get("type") == until or len(frames) >= limit:
                break
    return frames


# ---------------------------------------------------------------- auth


async def test_every_route_needs_auth(web: Web) -> None:
    async with web.client(auth=False) as anon:
        checked = 0
        for op in web.server.ops:
            if op.path == "/api/v1/login":
                continue
            path = re.sub(r"{[^}]+}", "x", op.path)
            response = await anon.request(op.method, path)
            assert response.status_code == 401, (op.method, path, response.text)
            checked += 1
        assert checked >= 35
        wrong = await anon.get("/api/v1/status", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        page = await anon.get("/", follow_redirects=False)
        assert page.status_code == 303 and page.headers["location"] == "/login?next=/"
        assert (await anon.get("/login")).status_code == 200
        assert (await anon.get("/static/app.js")).status_code == 200
    async with web.client(auth=False, headers={"X-API-Key": web.token}) as keyed:
        assert (await keyed.get("/api/v1/status")).status_code == 200


async def test_openapi_lists_every_route(web: Web) -> None:
    async with web.client() as c:
        schema = (await c.get("/api/v1/openapi.json")).json()
    assert schema["openapi"].startswith("3.")
    for op in web.server.ops:
        path = re.sub(r"{(\w+)(:\w+)?}", r"{\1}", op.path)
        assert op.method.lower() in schema["paths"][path], (op.method, path)
    for route in web.server.app.routes:
        path = getattr(route, "path", "")
        if path.startswith(("/api/", "/v1/")):
            assert re.sub(r"{(\w+)(:\w+)?}", r"{\1}", path) in schema["paths"], path


async def test_browser_session_cookie_and_csrf(web: Web) -> None:
    async with httpx.AsyncClient(base_url=web.url, verify=False) as browser:
        bad = await browser.post("/api/v1/login", json={"token": "wrong"})
        assert bad.status_code == 401
        login = await browser.post("/api/v1/login", json={"token": web.token})
        assert login.status_code == 200
        cookies = login.headers.get_list("set-cookie")
        session = next(c for c in cookies if c.startswith("homeagent_session="))
        assert "HttpOnly" in session and "SameSite=strict" in session.replace("Strict", "strict")
        csrf = login.json()["csrf"]
        assert (await browser.get("/api/v1/status")).status_code == 200
        assert (await browser.get("/", follow_redirects=False)).status_code == 200
        no_csrf = await browser.post("/api/v1/chat/cancel")
        assert no_csrf.status_code == 403 and "CSRF" in no_csrf.json()["error"]
        wrong_csrf = await browser.post("/api/v1/chat/cancel", headers={"X-CSRF-Token": "x" + csrf})
        assert wrong_csrf.status_code == 403
        cross = await browser.post(
            "/api/v1/chat/cancel", headers={"X-CSRF-Token": csrf, "Origin": "http://evil.example"}
        )
        assert cross.status_code == 403
        good = await browser.post("/api/v1/chat/cancel", headers={"X-CSRF-Token": csrf})
        assert good.status_code == 200 and good.json() == {"cancelled": False}
        out = await browser.post("/api/v1/logout", headers={"X-CSRF-Token": csrf})
        assert out.status_code == 200
        assert (await browser.get("/api/v1/status")).status_code == 401


async def test_login_is_rate_limited_per_address(web: Web) -> None:
    async with httpx.AsyncClient(base_url=web.url, verify=False) as c:
        for _ in range(5):
            assert (await c.post("/api/v1/login", json={"token": "guess"})).status_code == 401
        locked = await c.post("/api/v1/login", json={"token": "guess again"})
        assert locked.status_code == 429
        assert int(locked.headers["Retry-After"]) >= 59
        # the right token still signs in: wrong guesses from the same address never lock its owner out
        assert (await c.post("/api/v1/login", json={"token": web.token})).status_code == 200
        # the API token itself keeps working for API clients
        assert (await c.get("/api/v1/status", headers={"Authorization": f"Bearer {web.token}"})).status_code == 200


def test_login_limiter_backs_off() -> None:
    now = [1000.0]
    limiter = LoginLimiter(limit=3, window=60, base_lockout=10, max_lockout=35, clock=lambda: now[0])
    assert [limiter.failure("a") for _ in range(3)] == [0, 0, 10]
    assert limiter.retry_after("a") == 10 and limiter.retry_after("b") == 0
    now[0] += 11
    assert [limiter.failure("a") for _ in range(3)] == [0, 0, 20]
    now[0] += 21
    assert [limiter.failure("a") for _ in range(3)][-1] == 35  # capped
    limiter.success("a")
    assert limiter.retry_after("a") == 0


async def test_token_rotation_over_the_socket(web: Web) -> None:
    old = web.token
    async with httpx.AsyncClient(base_url=web.url, verify=False) as browser:
        assert (await browser.post("/api/v1/login", json={"token": old})).status_code == 200
        client = await Client.connect(web.daemon.paths.socket)
        try:
            result = await client.call("webui.token", {})
        finally:
            await client.close()
        new = result["token"]
        assert new != old and result["url"] == web.url
        assert (await browser.get("/api/v1/status")).status_code == 401  # sessions signed out
    async with web.client(auth=False) as c:
        assert (await c.get("/api/v1/status", headers={"Authorization": f"Bearer {old}"})).status_code == 401
        assert (await c.get("/api/v1/status", headers={"Authorization": f"Bearer {new}"})).status_code == 200
    stored = web.daemon.config.get("plugin.webui.token_hash")
    assert new not in json.dumps(web.daemon.config.dump(mask_secrets=False)) and stored.startswith("sha256:")


async def test_a_closed_web_ui_leaves_no_socket_methods_behind(daemon: Daemon) -> None:
    from homeagent.cli.client import RemoteError

    web = await start_web(daemon)
    client = await Client.connect(daemon.paths.socket)
    try:
        assert (await client.call("webui.info", {}))["url"] == web.url
        await web.server.close()
        with pytest.raises(RemoteError, match=r"unknown method 'webui\.info'"):
            await client.call("webui.info", {})
        again = await start_webui(daemon.web_host(), listen="127.0.0.1:0")  # a later one registers them afresh
        try:
            assert (await client.call("webui.info", {}))["url"] == again.url
        finally:
            await again.close()
    finally:
        await client.close()


async def test_cli_webui_token_rotates_through_the_daemon(web: Web) -> None:
    result = await run_cli(web.daemon.paths.root, "webui", "token")
    assert result.code == 0, result.err
    assert "previous one no longer works" in result.out
    new = re.search(r"token: (\S+)", result.out)
    assert new is not None
    async with web.client(auth=False, headers={"X-API-Key": new.group(1)}) as c:
        assert (await c.get("/api/v1/status")).status_code == 200


async def test_cli_webui_token_without_a_daemon(tmp_path: Path) -> None:
    data = tmp_path / "d"
    result = await run_cli(data, "webui", "token", "--json")
    assert result.code == 0, result.err
    out = json.loads(result.out)
    assert out["rotated_by"] == "data directory" and len(out["token"]) > 30


# ---------------------------------------------------------------- addresses


async def test_refuses_remote_address_without_allow_remote(daemon: Daemon) -> None:
    with pytest.raises(WebUIError, match="allow_remote"):
        await start_webui(daemon.web_host(), listen="0.0.0.0:0")


async def test_port_in_use_fails_clearly_and_daemon_keeps_running(web: Web) -> None:
    with pytest.raises(WebUIError, match="already in use"):
        await start_webui(web.daemon.web_host(), listen=f"127.0.0.1:{web.server.port}")
    async with web.client() as c:
        assert (await c.get("/api/v1/status")).status_code == 200
    assert not web.daemon.stopped.is_set()


# ---------------------------------------------------------------- chat


async def test_chat_send_and_client_msg_id_dedupe(web: Web) -> None:
    async with web.client() as c:
        first, again = await asyncio.gather(
            c.post("/api/v1/chat", json={"text": "hello dedupe", "client_msg_id": "m-1"}),
            c.post("/api/v1/chat", json={"text": "hello dedupe", "client_msg_id": "m-1"}),
        )
        assert first.status_code == again.status_code == 200
        assert first.json()["ok"] and first.json()["text"].startswith("[offline] I received: hello dedupe")
        assert first.json()["id"] == again.json()["id"]
        later = await c.post("/api/v1/chat", json={"text": "hello dedupe", "client_msg_id": "m-1"})
        assert later.json()["id"] == first.json()["id"]
    assert web.daemon.agent.turns == 1
    browser, csrf = await web.browser_client()
    try:
        other = await browser.post(
            "/api/v1/chat", json={"text": "hello dedupe", "client_msg_id": "m-1"}, headers={"X-CSRF-Token": csrf}
        )
        assert other.json()["id"] != first.json()["id"]  # another client: its own turn
    finally:
        await browser.aclose()
    assert web.daemon.agent.turns == 2


async def test_chat_stream_shows_tool_call_and_text(web: Web) -> None:
    async with (
        web.client() as c,
        c.stream("POST", "/api/v1/chat/stream", json={"text": "/tool output_list_channels {}"}) as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        frames = await read_sse(response)
    kinds = [f["type"] for f in frames]
    assert kinds[0] == "accepted" and kinds[-1] == "response"
    tool = next(f for f in frames if f["type"] == "tool_call")
    assert tool["tool"] == "output_list_channels" and tool["status"] == "ok" and "webui" in tool["result"]
    assert kinds.index("tool_call") < kinds.index("content_delta")
    text = "".join(f["text"] for f in frames if f["type"] == "content_delta")
    assert text == frames[-1]["text"] and "The tool returned" in text


async def test_stop_cancels_the_running_turn(web: Web) -> None:
    started = add_sleep_tool(web.daemon)
    async with (
        web.client() as c,
        c.stream("POST", "/api/v1/chat/stream", json={"text": "/tool webtest_sleep {}"}) as response,
    ):
        reader = asyncio.create_task(read_sse(response))
        await asyncio.wait_for(started.wait(), 10)
        async with web.client() as c2:
            assert (await c2.post("/api/v1/chat/cancel")).json() == {"cancelled": True}
        frames = await asyncio.wait_for(reader, 10)
    final = frames[-1]
    assert final["type"] == "response" and final["interrupted"] is True
    assert any(f["type"] == "tool_call" and f["status"] == "interrupted" for f in frames)


async def test_interrupt_text_reaches_the_model(web: Web) -> None:
    # the offline provider "recalls" prompt lines sharing a word with the input; keep "webui" out of the prompt
    web.daemon.channels.unregister_plugin("webui")
    started = add_sleep_tool(web.daemon, seconds=0.5)
    async with (
        web.client() as c,
        c.stream("POST", "/api/v1/chat/stream", json={"text": "/tool webtest_sleep {}"}) as response,
    ):
        reader = asyncio.create_task(read_sse(response))
        await asyncio.wait_for(started.wait(), 10)
        async with web.client() as c2:
            answer = await c2.post("/api/v1/chat/interrupt", json={"text": "xyzzy plover"})
            assert answer.status_code == 200 and answer.json()["busy"] is True
        frames = await asyncio.wait_for(reader, 10)
    assert "[打断消息]" in frames[-1]["text"] and "xyzzy plover" in frames[-1]["text"]


async def test_history_comes_from_the_text_log(web: Web) -> None:
    async with web.client() as c:
        reply = (await c.post("/api/v1/chat", json={"text": "zorbl quuxle"})).json()
        history = (await c.get("/api/v1/chat/history?limit=10&channel=webui")).json()["messages"]
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert history[0]["content"] == "zorbl quuxle" and history[1]["content"] == reply["text"]
    assert history[1]["id"] == reply["id"]


async def test_malformed_and_wrong_bodies_get_clear_errors(web: Web) -> None:
    async with web.client() as c:
        bad = await c.post("/api/v1/chat", content=b"{not json", headers={"Content-Type": "application/json"})
        assert bad.status_code == 400 and bad.json()["error"].startswith("malformed JSON")
        assert (await c.post("/api/v1/chat", json=["a list"])).status_code == 400
        missing = await c.post("/api/v1/chat", json={"txt": "hi"})
        assert missing.status_code == 400 and "text" in missing.json()["error"]
        wrong_type = await c.post("/api/v1/chat", json={"text": 5})
        assert wrong_type.status_code == 400
        huge = await c.post(
            "/api/v1/chat", content=b"x" * (2 * 1024 * 1024), headers={"Content-Type": "application/json"}
        )
        assert huge.status_code == 413
        assert (await c.get("/api/v1/nope")).status_code == 404
        assert (await c.delete("/api/v1/status")).status_code == 405
        assert (await c.get("/api/v1/status")).status_code == 200  # still fine


# ---------------------------------------------------------------- uploads


async def test_upload_saves_under_a_random_name_and_can_be_downloaded(web: Web) -> None:
    async with web.client() as c:
        response = await c.post(
            "/api/v1/chat/file",
            data={"inject": "false"},
            files={"file": ("../../evil name.html", b"<script>x</script>", "text/html")},
        )
        assert response.status_code == 200, response.text
        info = response.json()["files"][0]
        assert info["name"] == "evil name.html"
        assert re.fullmatch(r"[0-9a-f]{24}\.bin", info["saved_as"])
        saved = web.daemon.paths.plugin_data("files") / "uploads" / info["saved_as"]  # where files_read reaches
        assert saved.read_bytes() == b"<script>x</script>"
        assert response.json()["note"].startswith("[file uploaded in the web UI: evil name.html")
        download = await c.get(info["url"])
        assert download.content == b"<script>x</script>"
        assert download.headers["content-type"] == "application/octet-stream"
        assert "attachment" in download.headers["content-disposition"]
        for path in (
            "/api/v1/uploads/..%2Fconfig.db",
            "/api/v1/uploads/../config.db",
            "/api/v1/uploads/config.db",
            "/api/v1/uploads/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        ):
            assert (await c.get(path)).status_code == 404, path
        turn = await c.post(
            "/api/v1/chat/file", data={"message": "look at this"}, files={"file": ("notes.txt", b"hello", "text/plain")}
        )
        assert turn.status_code == 200 and turn.json()["result"]["ok"] is True
        history = (await c.get("/api/v1/chat/history?limit=2")).json()["messages"]
        asked = history[0]["content"]
        assert asked.startswith("look at this") and "notes.txt (5 B)" in asked and "saved at" in asked
        # the model reads it with the file tools, by the path the note gives
        stored = re.search(r"files_read path: (uploads/[0-9a-f]{24}\.txt)\]", asked)
        assert stored is not None, asked
        read = await c.post("/api/v1/chat", json={"text": "/tool files_read " + json.dumps({"path": stored.group(1)})})
        assert read.status_code == 200 and "hello" in read.text, read.text


async def test_oversized_and_malformed_uploads_are_refused(web: Web) -> None:
    web.daemon.config.set("plugin.webui.max_upload_mb", 1)
    uploads = web.daemon.paths.plugin_data("files") / "uploads"
    async with web.client() as c:
        big = await c.post("/api/v1/chat/file", files={"file": ("big.bin", b"\0" * (3 * 1024 * 1024))})
        assert big.status_code == 413 and "too large" in big.json()["error"]

        async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: caught while it streams
            yield b'--b\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n\r\n'
            for _ in range(40):
                yield b"\0" * (128 * 1024)

        streamed = await c.post(
            "/api/v1/chat/file", content=chunked(), headers={"Content-Type": "multipart/form-data; boundary=b"}
        )
        assert streamed.status_code == 413
        assert (await c.post("/api/v1/chat/file", json={"a": 1})).status_code == 415
        broken = await c.post("/api/v1/chat/file", content=b"garbage", headers={"Content-Type": "multipart/form-data"})
        assert broken.status_code == 400
        no_file = await c.post("/api/v1/chat/file", files={"message": (None, "only text")})
        assert no_file.status_code == 400 and "no file" in no_file.json()["error"]
    assert not uploads.exists() or not [p for p in uploads.iterdir() if p.is_file()]


# ---------------------------------------------------------------- settings


async def test_settings_grouped_and_secrets_masked(web: Web) -> None:
    secret = "sk-verysecretvalue-1234"
    web.daemon.config.set("core.llm.api_key", secret)
    async with web.client() as c:
        response = await c.get("/api/v1/settings")
    body = response.text
    assert secret not in body and "****1234" in body
    assert "token_hash" not in body
    categories = {cat["name"]: cat["settings"] for cat in response.json()["categories"]}
    assert {"llm", "agent", "webui"} <= set(categories)
    turns = next(s for s in categories["agent"] if s["key"] == "core.agent.max_tool_turns")
    assert turns["type"] == "int" and turns["min"] == 1 and turns["value"] == 10


async def test_settings_put_validates_every_field_and_is_all_or_nothing(web: Web) -> None:
    config = web.daemon.config
    async with web.client() as c:
        ok = await c.put("/api/v1/settings", json={"core.agent.max_tool_turns": "12", "core.llm.temperature": 0.3})
        assert ok.status_code == 200 and ok.json()["saved"] == {
            "core.agent.max_tool_turns": 12,
            "core.llm.temperature": 0.3,
        }
        assert config.get("core.agent.max_tool_turns") == 12
        bad = await c.put(
            "/api/v1/settings",
            json={
                "core.agent.max_tool_turns": "many",
                "core.agent.max_tool_turnz": 3,
                "core.daemon.log_level": "loud",
                "core.llm.max_tokens": 20,
            },
        )
        assert bad.status_code == 400
        errors = bad.json()["errors"]
        assert set(errors) == {"core.agent.max_tool_turns", "core.agent.max_tool_turnz", "core.daemon.log_level"}
        assert "whole number" in errors["core.agent.max_tool_turns"]
        assert "did you mean" in errors["core.agent.max_tool_turnz"]
        assert config.get("core.llm.max_tokens") == 4096  # nothing was written
        ro = await c.put("/api/v1/settings", json={"plugin.webui.token_hash": "sha256:00"})
        assert ro.status_code == 400 and "homeagent webui token" in ro.json()["errors"]["plugin.webui.token_hash"]
        config.set("core.llm.api_key", "sk-keep-this-secret-9876")
        masked = await c.put("/api/v1/settings", json={"core.llm.api_key": "****9876"})
        assert masked.status_code == 200 and masked.json()["saved"] == {}
        assert config.get("core.llm.api_key") == "sk-keep-this-secret-9876"
        assert (await c.put("/api/v1/settings", json={})).status_code == 400
        assert (
            await c.put("/api/v1/settings", content=b"[1,", headers={"Content-Type": "application/json"})
        ).status_code == 400


# ---------------------------------------------------------------- events


async def test_events_replay_after_last_event_id(web: Web) -> None:
    bus = web.daemon.events
    marks = [bus.publish("webtest", {"n": i}) for i in range(5)]
    async with (
        web.client() as c,
        c.stream("GET", "/api/v1/events?types=webtest", headers={"Last-Event-ID": str(marks[1].id)}) as response,
    ):
        seen: list[int] = []
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                data = json.loads(line[5:])
                if data.get("type") == "webtest":
                    seen.append(data["data"]["n"])
                    if len(seen) == 3:
                        bus.publish("webtest", {"n": 99})
                    if len(seen) == 4:
                        break
    assert seen == [2, 3, 4, 99]


async def test_an_sse_client_that_never_reads_costs_bounded_memory_and_is_told_why_it_was_dropped(web: Web) -> None:
    reader, writer = await asyncio.open_connection(web.server.host, web.server.port)
    host = f"127.0.0.1:{web.server.port}"
    writer.write(f"GET /api/v1/events HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {web.token}\r\n\r\n".encode())
    await writer.drain()
    await asyncio.sleep(0.2)  # connected and subscribed; from now on it reads nothing
    bus = web.daemon.events
    payload = "x" * 20_000
    started = time.perf_counter()
    for i in range(600):  # 12 MB through a client that reads nothing: its buffer (256 events) fills
        bus.publish("flood", {"i": i, "payload": payload})
        if i % 200 == 0:
            await asyncio.sleep(0)
    await asyncio.sleep(0.3)
    sub = next(s for s in bus.stats() if s["name"] == "webui-sse")
    assert sub["queued"] <= 256 and sub["dropped"] > 0  # bounded, still following
    for i in range(1400):  # it has now lost more than 1,024 events: the daemon lets go of its buffer
        bus.publish("flood", {"i": i, "payload": payload})
        if i % 200 == 0:
            await asyncio.sleep(0)
    publish_s = time.perf_counter() - started
    await asyncio.sleep(0.3)
    assert not [s for s in bus.stats() if s["name"] == "webui-sse"]
    async with web.client() as c:
        t0 = time.perf_counter()
        assert (await c.get("/api/v1/status")).status_code == 200
        status_ms = (time.perf_counter() - t0) * 1000
    assert publish_s < 4.0
    assert status_ms < 500
    # when it reads again, it gets what was in flight, then an overflow event that says why, then the end
    received = b""
    async with asyncio.timeout(20):
        while not received.endswith(b"0\r\n\r\n"):
            more = await reader.read(1 << 16)
            assert more, received[-500:]
            received += more
    writer.close()
    assert b"event: overflow" in received
    overflow = received[received.index(b"event: overflow"):].split(b"data: ", 1)[1].split(b"\n", 1)[0]
    assert json.loads(overflow)["dropped"] > 0 and "reconnect" in json.loads(overflow)["message"]


async def test_fifty_concurrent_sessions_stay_separate(web: Web) -> None:
    clients = [await web.browser_client() for _ in range(50)]
    secrets = [uuid.uuid4().hex for _ in clients]

    async def one(client: httpx.AsyncClient, csrf: str, secret: str) -> str:
        async with client.stream(
            "POST", "/api/v1/chat/stream", json={"text": f"my secret is {secret}"}, headers={"X-CSRF-Token": csrf}
        ) as response:
            frames = await read_sse(response)
        return "".join(f.get("text", "") for f in frames if f["type"] in ("content_delta", "response"))

    async def probe() -> float:
        async with web.client() as c:
            t0 = time.perf_counter()
            assert (await c.get("/api/v1/status")).status_code == 200
            return time.perf_counter() - t0

    try:
        results, latency = await asyncio.gather(
            asyncio.gather(*(one(cl, csrf, s) for (cl, csrf), s in zip(clients, secrets, strict=True))),
            probe(),
        )
    finally:
        for cl, _ in clients:
            await cl.aclose()
    for text, secret in zip(results, secrets, strict=True):
        assert secret in text
        assert all(other not in text for other in secrets if other != secret)
    assert latency < 3.0  # generous: CI machines are small and busy; it is ~0.1 s on a quiet one
    assert len(web.server.ctx.sessions) == 50


# ---------------------------------------------------------------- subsystems


# the route of each feature /api/v1/status lists: a feature the UI shows must answer on the daemon's own wiring
FEATURE_ROUTES = {
    "plugins": "/api/v1/plugins",
    "context": "/api/v1/memory/context",
    "documents": "/api/v1/memory/documents",
    "graph": "/api/v1/memory/graph",
    "knowledge": "/api/v1/knowledge",
    "adapters": "/api/v1/adapters",
    "approvals": "/api/v1/approvals",
    "media": "/api/v1/memory/media",
}


async def test_a_daemon_serves_every_feature_the_ui_lists(web: Web) -> None:
    async with web.client() as c:
        features = (await c.get("/api/v1/status")).json()["features"]
        assert set(features) == set(FEATURE_ROUTES)
        assert all(features.values()), features
        for name, path in FEATURE_ROUTES.items():
            response = await c.get(path)
            assert response.status_code == 200, (name, response.text)
        assert (await c.get("/api/v1/memory/stats")).status_code == 200


async def test_with_the_media_store_off_its_routes_say_so_and_memory_still_answers(data_dir: Path) -> None:
    from homeagent.config import ConfigRegistry, core_defs
    from homeagent.paths import DataPaths

    config = ConfigRegistry(data_dir / "config.db")
    for definition in core_defs(data_dir):
        config.register_def(definition)
    config.set("core.memory.media.enabled", False)
    config.close()
    daemon = Daemon(DataPaths(data_dir), web=False)
    await daemon.start()
    try:
        web = await start_web(daemon)
        try:
            async with web.client() as c:
                features = (await c.get("/api/v1/status")).json()["features"]
                assert features["media"] is False
                assert all(v for k, v in features.items() if k != "media")
                for path in ("/api/v1/memory/media", "/api/v1/memory/media/0123456789ab",
                             "/api/v1/memory/media/0123456789ab/raw"):
                    off = await c.get(path)
                    assert off.status_code == 501, (path, off.text)
                    assert "the media store is off" in off.json()["error"]
                    assert off.json()["missing"] == "media"
                sent = await c.post("/api/v1/chat/file", data={"inject": "false"},
                                    files={"file": ("a.png", b"\x89PNG\r\n\x1a\n", "image/png")})
                assert sent.status_code == 200, sent.text  # an upload is still kept, as a plain file
                assert (await c.get("/api/v1/memory/stats")).status_code == 200
                assert (await c.get("/api/v1/memory/documents")).status_code == 200
        finally:
            await web.server.close()
    finally:
        await daemon.stop()


async def test_adapters_list_view_save_with_syntax_check(web: Web) -> None:
    async with web.client() as c:
        listed = (await c.get("/api/v1/adapters")).json()["adapters"]
        assert "openai" in {a["name"] for a in listed}
        builtin = (await c.get("/api/v1/adapters/openai")).json()
        assert builtin["builtin"] is True and "transform_request" in builtin["code"]
        broken = await c.put("/api/v1/adapters/mine", json={"code": "return { transform_request = function( }"})
        assert broken.status_code == 400 and broken.json()["error"]
        assert not (web.daemon.paths.adapters / "mine.lua").exists()
        shape = await c.put("/api/v1/adapters/mine", json={"code": "return {}"})
        assert shape.status_code == 400 and "transform_request" in shape.json()["error"]
        saved = await c.put("/api/v1/adapters/mine", json={"code": builtin["code"]})
        assert saved.status_code == 200, saved.text
        assert (web.daemon.paths.adapters / "mine.lua").read_text() == builtin["code"]
        assert "mine" in {a["name"] for a in (await c.get("/api/v1/adapters")).json()["adapters"]}
        assert (await c.get("/api/v1/adapters/..%2Fconfig")).status_code in (400, 404)
        assert (await c.put("/api/v1/adapters/bad.name", json={"code": "x"})).status_code == 400
        assert (await c.delete("/api/v1/adapters/openai")).status_code == 404  # built-ins stay
        assert (await c.delete("/api/v1/adapters/mine")).status_code == 200
        assert not (web.daemon.paths.adapters / "mine.lua").exists()


async def test_memory_routes_over_the_daemons_own_stores(web: Web) -> None:
    from homeagent.memory.context import ContextEvent

    d = web.daemon
    d.context.append(ContextEvent(kind="user", input="I planted tomatoes in the garden", channel="webui"))
    await d.docs.acommit("An older note about the weather.", summary="weather")
    await d.docs.acommit("The garden has tomatoes and basil.", summary="garden")
    await d.graph.commit(
        [
            {"subject": "Alice", "relation": "lives_in", "object": "Paris"},
            {"subject": "Alice", "relation": "likes", "object": "tea"},
        ]
    )
    await d.knowledge.add("garden", "# Garden\nTomatoes need sun.")
    async with web.client() as c:
        timeline = (await c.get("/api/v1/memory/context")).json()
        assert timeline["events"][-1]["input"] == "I planted tomatoes in the garden"
        assert timeline["total"] == len(d.context)
        found = (await c.get("/api/v1/memory/documents?q=tomatoes garden")).json()["documents"]
        assert found and "tomatoes" in found[0]["content"]
        assert found[0]["access_count"] == 0  # browsing is not recall: nothing counted as used
        recent = (await c.get("/api/v1/memory/documents")).json()["documents"]
        assert [r["summary"] for r in recent] == ["garden", "weather"]  # newest first
        assert [r["summary"] for r in (await c.get("/api/v1/memory/documents?limit=1")).json()["documents"]] == [
            "garden"
        ]
        view = (await c.get("/api/v1/memory/graph?q=Alice")).json()
        assert {n["id"] for n in view["nodes"]} == {"Alice", "Paris", "tea"}
        assert ("Alice", "Paris", "lives_in") in {(e["source"], e["target"], e["label"]) for e in view["edges"]}
        overview = (await c.get("/api/v1/memory/graph")).json()
        assert len(overview["nodes"]) == 3 and len(overview["edges"]) == 2
        stats = (await c.get("/api/v1/memory/stats")).json()
        assert stats["context"]["events"] == 1 and stats["documents"]["documents"] == 2
        assert stats["graph"]["entities"] == 3 and stats["knowledge"]["entries"] == 1
        search = (await c.get("/api/v1/memory/search?q=tomatoes")).json()
        assert search["context"] and search["documents"] and search["knowledge"][0]["name"] == "garden"
        assert (await c.get("/api/v1/memory/search")).status_code == 400


async def test_remote_address_with_allow_remote_warns(daemon: Daemon, caplog: pytest.LogCaptureFixture) -> None:
    daemon.config.set("webui.allow_remote", True)
    server = await start_webui(daemon.web_host(), listen="0.0.0.0:0")
    try:
        assert server.port > 0
        assert "non-loopback" in caplog.text
    finally:
        await server.close()


async def test_events_after_a_daemon_restart_are_not_skipped(web: Web) -> None:
    web.daemon.events.publish("webtest", {"n": 1})
    async with (
        web.client() as c,
        c.stream("GET", "/api/v1/events?types=webtest", headers={"Last-Event-ID": "999999"}) as response,
    ):
        async for line in response.aiter_lines():
            if line.startswith("event: hello"):
                web.daemon.events.publish("webtest", {"n": 2})
            if line.startswith("data:") and '"webtest"' in line:
                assert json.loads(line[5:])["data"]["n"] == 2
                break


async def test_plugin_manager_over_a_real_registry(web: Web, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from homeagent.plugins.package import pack_plugin
    from homeagent.plugins.registry import PluginRegistry

    d = web.daemon
    assert isinstance(d.plugins, PluginRegistry), "the daemon wires its plugin registry itself"
    package, _, _ = pack_plugin(Path(__file__).parent / "fixtures" / "plugins" / "luademo", tmp_path / "luademo.hmap")
    async with web.client() as c:
        installed = await c.post("/api/v1/plugins", files={"file": ("luademo.hmap", package.read_bytes())})
        assert installed.status_code == 201, installed.text
        assert installed.json()["installed"]["state"] == "running"
        listed = (await c.get("/api/v1/plugins")).json()["plugins"]
        assert "luademo" in {p["name"] for p in listed}
        info = (await c.get("/api/v1/plugins/luademo")).json()
        assert info["kind"] == "lua" and info["disabled"] is False
        assert (await c.post("/api/v1/plugins/luademo/disable")).json()["result"]["state"] == "disabled"
        assert (await c.get("/api/v1/plugins/luademo")).json()["disabled"] is True
        assert (await c.post("/api/v1/plugins/luademo/enable")).json()["result"]["state"] == "running"
        assert (await c.post("/api/v1/plugins/luademo/reload")).json()["result"]["state"] == "running"
        again = await c.post("/api/v1/plugins", files={"file": ("luademo.hmap", package.read_bytes())})
        assert again.status_code == 400 and "already installed" in again.json()["error"]
        junk = await c.post("/api/v1/plugins", files={"file": ("x.hmap", b"not a zip")})
        assert junk.status_code == 400
        missing = await c.get("/api/v1/plugins/nosuch")
        assert missing.status_code == 404 and "no plugin named" in missing.json()["error"]
        assert (await c.get("/api/v1/plugins/..%2F..%2Fetc")).status_code in (400, 404)
        assert (await c.delete("/api/v1/plugins/luademo")).status_code == 200
        assert not (d.paths.plugins / "luademo").exists()
    assert not [p for p in (d.paths.root / "uploads" / ".plugins").iterdir()]  # staging cleaned up


async def test_knowledge_editor_over_a_real_knowledge_base(web: Web, monkeypatch: pytest.MonkeyPatch) -> None:
    from homeagent.knowledge.base import KnowledgeBase

    assert isinstance(web.daemon.knowledge, KnowledgeBase), "the daemon wires its knowledge base itself"
    async with web.client() as c:
        saved = await c.post("/api/v1/knowledge", json={"name": "菜谱", "content": "# 番茄炒蛋\n先炒蛋，再炒番茄。"})
        assert saved.status_code == 200, saved.text
        assert (web.daemon.paths.knowledge / "菜谱" / "content.md").read_text(encoding="utf-8").startswith("# 番茄炒蛋")
        entries = (await c.get("/api/v1/knowledge")).json()["entries"]
        assert "菜谱" in {e["name"] for e in entries}
        assert (await c.get("/api/v1/knowledge/菜谱")).json()["content"].endswith("再炒番茄。")
        hits = (await c.get("/api/v1/knowledge/search", params={"q": "番茄"})).json()["results"]
        assert hits and hits[0]["name"] == "菜谱"
        for bad in ("../escape", ".hidden", "a/b"):
            response = await c.post("/api/v1/knowledge", json={"name": bad, "content": "x"})
            assert response.status_code == 400, bad
        assert not (web.daemon.paths.root / "escape").exists()
        assert (await c.get("/api/v1/knowledge/nosuch")).status_code == 404
        assert (await c.delete("/api/v1/knowledge/菜谱")).status_code == 200
        assert (await c.delete("/api/v1/knowledge/菜谱")).status_code == 404


async def test_sign_in_form_without_javascript(web: Web) -> None:
    async with httpx.AsyncClient(base_url=web.url, verify=False) as browser:
        bad = await browser.post("/api/v1/login", data={"token": "nope"}, follow_redirects=False)
        assert bad.status_code == 303 and bad.headers["location"] == "/login?error=1"
        good = await browser.post("/api/v1/login", data={"token": web.token}, follow_redirects=False)
        assert good.status_code == 303 and good.headers["location"] == "/"
        assert (await browser.get("/api/v1/session")).json()["kind"] == "session"
        huge = await browser.post(
            "/api/v1/login",
            content=b"token=" + b"x" * 100_000,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert huge.status_code == 413


async def test_close_ends_open_streams_promptly(daemon: Daemon) -> None:
    web = await start_web(daemon)
    async with web.client() as c, c.stream("GET", "/api/v1/events") as response:
        lines = response.aiter_lines()
        assert (await anext(lines)).startswith("event: hello")
        started = time.perf_counter()
        await web.server.close()
        with pytest.raises(StopAsyncIteration):
            while True:
                await asyncio.wait_for(anext(lines), 5)
        assert time.perf_counter() - started < 3
    assert not [s for s in daemon.events.stats() if s["name"] == "webui-sse"]
