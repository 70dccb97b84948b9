"""Web UI hardening (issue 22, item 8 and the web part of item 3), over HTTP against the daemon's real web server.

* DNS rebinding: a page on another name that resolves to 127.0.0.1 reaches the
  loopback UI with its own name in ``Host``; only this server's own names
  (and ``webui.allowed_hosts``) are answered, the rest get 421.
* The sign-in lockout counts wrong tokens only, and the right token signs in
  even while the address is locked out.
* One client (a session, or the API token) may have only so many turns queued.
"""

from __future__ import annotations

import asyncio

import httpx

from tests.fakes.webui_fixtures import Web, add_sleep_tool


async def test_only_this_servers_own_names_are_answered(web: Web) -> None:
    port = web.server.port
    async with web.client() as c:
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST.:{port}", f"[::1]:{port}"):
            assert (await c.get("/api/v1/status", headers={"Host": host})).status_code == 200, host
        for host in (f"evil.example:{port}", f"127.0.0.1:{port + 1}", "127.0.0.1", f"localhost.evil.example:{port}"):
            refused = await c.get("/api/v1/status", headers={"Host": host})
            assert refused.status_code == 421, host
            assert "webui.allowed_hosts" in refused.json()["error"] and "DNS rebinding" in refused.json()["error"]
        # pages and the sign-in call too, before any authentication is looked at
        async with web.client(auth=False) as anon:
            page = await anon.get("/login", headers={"Host": f"evil.example:{port}"})
            assert page.status_code == 421 and f"127.0.0.1:{port}" in page.text
            login = await anon.post("/api/v1/login", json={"token": web.token}, headers={"Host": f"evil.example:{port}"})
            assert login.status_code == 421 and "homeagent_session" not in login.cookies


async def test_allowed_hosts_adds_names_and_applies_at_once(web: Web) -> None:
    port = web.server.port
    web.daemon.config.set("webui.allowed_hosts", "homeagent.lan, box.lan:9999")
    async with web.client() as c:
        assert (await c.get("/api/v1/status", headers={"Host": f"homeagent.lan:{port}"})).status_code == 200
        assert (await c.get("/api/v1/status", headers={"Host": "box.lan:9999"})).status_code == 200  # a proxy's port
        assert (await c.get("/api/v1/status", headers={"Host": f"box.lan:{port}"})).status_code == 421
        web.daemon.config.set("webui.allowed_hosts", "")
        assert (await c.get("/api/v1/status", headers={"Host": f"homeagent.lan:{port}"})).status_code == 421


async def test_wrong_guesses_never_lock_out_the_right_token(web: Web) -> None:
    async with httpx.AsyncClient(base_url=web.url, verify=False) as attacker, httpx.AsyncClient(
        base_url=web.url, verify=False
    ) as owner:
        for _ in range(5):
            assert (await attacker.post("/api/v1/login", json={"token": "guess"})).status_code == 401
        locked = await attacker.post("/api/v1/login", json={"token": "guess"})
        assert locked.status_code == 429 and "too many failed sign-ins" in locked.json()["error"]
        # same address (everything local is 127.0.0.1), right token: signed in
        signed_in = await owner.post("/api/v1/login", json={"token": web.token})
        assert signed_in.status_code == 200 and "homeagent_session" in signed_in.cookies
        assert (await owner.get("/api/v1/status")).status_code == 200
        # the no-JavaScript form works as well
        form = await owner.post("/api/v1/login", data={"token": web.token}, follow_redirects=False)
        assert form.status_code == 303 and form.headers["location"] == "/"
        # and the guesser is still held back
        for _ in range(6):
            again = await attacker.post("/api/v1/login", json={"token": "guess"})
        assert again.status_code == 429


async def test_turns_per_client_are_limited_and_others_are_served(web: Web) -> None:
    web.daemon.config.set("plugin.webui.max_concurrent_turns", 2)
    add_sleep_tool(web.daemon, seconds=0.5)
    async with web.client() as c:
        running = [
            asyncio.create_task(c.post("/api/v1/chat", json={"text": "/tool webtest_sleep {}"})) for _ in range(2)
        ]
        for _ in range(1000):  # both requests have reached the server and hold their slots
            if web.server.ctx.turns.open("token") == 2:
                break
            await asyncio.sleep(0.01)
        busy = await c.post("/api/v1/chat", json={"text": "one more"})
        assert busy.status_code == 429 and busy.json()["code"] == "busy"
        assert "plugin.webui.max_concurrent_turns" in busy.json()["error"] and busy.headers["Retry-After"] == "1"
        openai = await c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        assert openai.status_code == 429 and "busy" in openai.json()["error"]["message"]
        # a browser session is another client: it is not held up by the token's turns
        browser, csrf = await web.browser_client()
        try:
            other = asyncio.create_task(
                browser.post("/api/v1/chat", json={"text": "hello"}, headers={"X-CSRF-Token": csrf})
            )
            assert [r.status_code for r in await asyncio.gather(*running)] == [200, 200]
            assert (await other).status_code == 200
        finally:
            await browser.aclose()
        # the slots are free again once the turns have finished
        assert web.server.ctx.turns.open("token") == 0
        assert (await c.post("/api/v1/chat", json={"text": "now"})).status_code == 200


async def test_interrupts_per_client_are_limited_to_a_humans_rate(web: Web) -> None:
    async with web.client() as c:
        replies = [await c.post("/api/v1/chat/interrupt", json={"text": f"stop {i}"}) for i in range(15)]
        codes = [r.status_code for r in replies]
        assert codes[:10] == [200] * 10 and codes.count(429) >= 3  # a burst of 10, then 5 a second
        refused = next(r for r in replies if r.status_code == 429)
        assert refused.json()["code"] == "busy" and "interrupts a second" in refused.json()["error"]
        # another client has its own allowance
        browser, csrf = await web.browser_client()
        try:
            mine = await browser.post("/api/v1/chat/interrupt", json={"text": "mine"}, headers={"X-CSRF-Token": csrf})
            assert mine.status_code == 200
        finally:
            await browser.aclose()
