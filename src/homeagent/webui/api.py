"""The core of /api/v1: sign-in, status, tools, LLM sources, settings and the live event stream.

Settings are generated from the ``ConfigDef``s (grouped by category, secrets
masked). A PUT is all or nothing: every field is checked first, and if any
is unknown or invalid nothing is written and each bad field gets its own
message.
"""

from __future__ import annotations

import copy
import difflib
import json
import logging
import time
from typing import Any
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse

from homeagent.config import ConfigError, coerce
from homeagent.config.defaults import SOURCE_PREFIX
from homeagent.config.labels_zh import SOURCE_FIELDS_ZH, ZH
from homeagent.config.values import base_type
from homeagent.llm_control import EDITABLE_FIELDS
from homeagent.msg import Msg, message_of
from homeagent.sdk.types import ConfigDef
from homeagent.webui.auth import CSRF_COOKIE, PLUGIN, SESSION_COOKIE, TOKEN_HASH_KEY
from homeagent.webui.common import (
    ApiError,
    Op,
    WebContext,
    field_str,
    ok,
    principal_of,
    read_body,
    read_json,
    read_object,
)
from homeagent.webui.sse import SSE_HEADERS, event_stream, parse_last_event_id

log = logging.getLogger("homeagent.webui")

CATEGORY_ORDER = ["llm", "agent", "approvals", "sandbox", "memory", "input", "webui", "daemon", "paths"]
READ_ONLY = {f"plugin.{PLUGIN}.{TOKEN_HASH_KEY}": Msg("the API token is changed with `homeagent webui token`")}


def client_ip(request: Request) -> str:
    return request.client.host if request.client else "unknown"


class CoreAPI:
    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx

    def ops(self) -> list[Op]:
        return [
            Op(
                "POST",
                "/api/v1/login",
                self.login,
                "Sign in with the API token (sets the session cookie)",
                "session",
                body={"type": "object", "required": ["token"], "properties": {"token": {"type": "string"}}},
            ),
            Op("POST", "/api/v1/logout", self.logout, "Sign out (ends the session)", "session"),
            Op("GET", "/api/v1/session", self.session, "Who is signed in, and the CSRF token for writes", "session"),
            Op("GET", "/api/v1/status", self.status, "Daemon status", "status"),
            Op("GET", "/api/v1/tools", self.tools, "Tools the agent can call", "status"),
            Op("GET", "/api/v1/channels", self.channels, "Output channels", "status"),
            Op("GET", "/api/v1/llm/sources", self.llm_sources, "LLM sources in fallback order", "llm"),
            Op(
                "POST",
                "/api/v1/llm/use",
                self.llm_use,
                "Make an LLM source the preferred one",
                "llm",
                body={"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
            ),
            Op(
                "POST",
                "/api/v1/llm/test",
                self.llm_test,
                "Send one tiny request to a source (with base_url/model/... given: to that unsaved source)",
                "llm",
                body={"type": "object", "required": ["name"], "properties": SOURCE_BODY},
            ),
            Op("GET", "/api/v1/llm/presets", self.llm_presets, "Providers offered by the setup page", "llm"),
            Op(
                "POST",
                "/api/v1/llm/sources",
                self.llm_save,
                "Add an LLM source or change one (a blank api_key keeps the stored key)",
                "llm",
                body={"type": "object", "required": ["name"], "properties": SOURCE_BODY},
            ),
            Op("DELETE", "/api/v1/llm/sources/{name}", self.llm_remove, "Remove a configured LLM source", "llm"),
            Op(
                "PUT",
                "/api/v1/llm/order",
                self.llm_order,
                "Set the fallback order of the sources (the first becomes preferred)",
                "llm",
                body={
                    "type": "object",
                    "required": ["names"],
                    "properties": {"names": {"type": "array", "items": {"type": "string"}}},
                },
            ),
            Op(
                "GET",
                "/api/v1/settings",
                self.settings,
                "Settings grouped by category (secrets masked); lang=zh gives Chinese labels",
                "settings",
                query=("lang",),
            ),
            Op(
                "PUT",
                "/api/v1/settings",
                self.put_settings,
                "Change settings: {key: value, ...}; all or nothing",
                "settings",
                body={"type": "object", "additionalProperties": True},
            ),
            Op(
                "GET",
                "/api/v1/events",
                self.events,
                "Live events as SSE; Last-Event-ID replays the ring",
                "events",
                query=("types", "last_event_id", "since"),
                stream=True,
            ),
        ]

    # ------------------------------------------------------------ session
    async def login(self, request: Request) -> Response:
        # The lockout stops guessing, not the owner: the token is checked first, and the right one
        # signs in even while wrong guesses from the same address (every local process shares
        # 127.0.0.1) keep that address locked out. Only wrong tokens count towards a lockout.
        ip = client_ip(request)
        form = request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded")
        if form:  # the sign-in page without JavaScript
            raw = (await read_body(request, limit=8192)).decode("utf-8", "replace")
            token = (parse_qs(raw).get("token") or [""])[0]
        else:
            token = field_str(await read_object(request), "token", max_len=512)
        if not self.ctx.tokens.check(token.strip()):
            wait = self.ctx.limiter.retry_after(ip)
            if wait > 0:
                self.ctx.limiter.failure(ip)
                err = ApiError(429, Msg("too many failed sign-ins; try again in {s} s", s=int(wait) + 1),
                               retry_after=int(wait) + 1)
                err.headers["Retry-After"] = str(int(wait) + 1)
                raise err
            lockout = self.ctx.limiter.failure(ip)
            log.warning("web UI: failed sign-in from %s%s", ip, f" (locked out for {lockout:.0f} s)" if lockout else "")
            if form:
                return RedirectResponse("/login?error=1", status_code=303)
            raise ApiError(401, Msg("wrong token"))
        self.ctx.limiter.success(ip)
        session = self.ctx.sessions.create(ip)
        response: Response = (
            RedirectResponse("/", status_code=303)
            if form
            else JSONResponse({"ok": True, "csrf": session.csrf, "expires": session.expires})
        )
        max_age = max(1, int(session.expires - time.time()))
        response.set_cookie(SESSION_COOKIE, session.id, max_age=max_age, httponly=True, samesite="strict", path="/")
        response.set_cookie(CSRF_COOKIE, session.csrf, max_age=max_age, httponly=False, samesite="strict", path="/")
        log.info("web UI: signed in from %s", ip)
        return response

    async def logout(self, request: Request) -> Response:
        principal = principal_of(request)
        if principal.session is not None:
            self.ctx.sessions.delete(principal.session.id)
        response = JSONResponse({"ok": True})
        response.delete_cookie(SESSION_COOKIE, path="/")
        response.delete_cookie(CSRF_COOKIE, path="/")
        return response

    async def session(self, request: Request) -> Response:
        principal = principal_of(request)
        if principal.session is None:
            return ok({"kind": "token"})
        return ok({"kind": "session", "csrf": principal.session.csrf, "expires": principal.session.expires})

    # ------------------------------------------------------------ status
    async def status(self, request: Request) -> Response:
        status = dict(self.ctx.daemon.status())
        status["webui"] = {
            "sessions": len(self.ctx.sessions),
            "streams": len(self.ctx.streams),
            "started": self.ctx.started,
        }
        status["features"] = self.ctx.daemon.features()
        return ok(status)

    async def tools(self, request: Request) -> Response:
        tools = [
            {"name": t.name, "plugin": t.plugin, "description": t.description, "no_memory": t.no_memory}
            for t in self.ctx.daemon.tools.tools()
        ]
        return ok({"tools": tools})

    async def channels(self, request: Request) -> Response:
        return ok({"channels": self.ctx.daemon.channels.list()})

    async def llm_sources(self, request: Request) -> Response:
        return ok(self.ctx.daemon.llm.sources())

    async def llm_use(self, request: Request) -> Response:
        name = field_str(await read_object(request), "name", max_len=200)
        try:
            return ok(self.ctx.daemon.llm.use({"name": name}))
        except (ValueError, ConfigError) as exc:
            raise ApiError(400, message_of(exc)) from None

    async def llm_test(self, request: Request) -> Response:
        body = await read_object(request)
        name = field_str(body, "name", max_len=200)
        try:
            if any(body.get(f) is not None for f in EDITABLE_FIELDS):
                return ok(await self.ctx.daemon.llm.test_spec(_source_fields(body)))
            return ok(await self.ctx.daemon.llm.test({"name": name}))
        except ValueError as exc:
            raise ApiError(400, message_of(exc)) from None

    async def llm_presets(self, request: Request) -> Response:
        return ok(self.ctx.daemon.llm.presets())

    async def llm_save(self, request: Request) -> Response:
        body = await read_object(request)
        try:
            result = self.ctx.daemon.llm.save_source(_source_fields(body))
        except (ValueError, ConfigError) as exc:
            raise ApiError(400, message_of(exc)) from None
        return ok(result, status=201 if result.get("created") else 200)

    async def llm_remove(self, request: Request) -> Response:
        name = str(request.path_params.get("name", ""))
        try:
            return ok(self.ctx.daemon.llm.remove_source({"name": name}))
        except (ValueError, ConfigError) as exc:
            raise ApiError(404, message_of(exc)) from None

    async def llm_order(self, request: Request) -> Response:
        body = await read_object(request)
        try:
            return ok(self.ctx.daemon.llm.reorder({"names": body.get("names")}))
        except (ValueError, ConfigError) as exc:
            raise ApiError(400, message_of(exc)) from None

    # ------------------------------------------------------------ settings
    async def settings(self, request: Request) -> Response:
        config = self.ctx.config
        zh = request.query_params.get("lang", "").lower().startswith("zh")
        groups: dict[str, list[dict[str, Any]]] = {}
        described: set[str] = set()
        for d in config.defs():
            described.add(d.key)
            if d.hidden or d.key in READ_ONLY:
                continue
            item = self._describe(d)
            if d.key in ENV_SECRET_KEYS:
                item["value"] = mask_env(item["value"])
            if zh:
                _translate(item)
            groups.setdefault(_category(d.key, d.category), []).append(item)
        for key, value in config.dump(mask_secrets=True).items():
            if key in described or key in READ_ONLY:
                continue
            secret = config.is_secret(key)
            groups.setdefault(_category(key, ""), []).append(
                {
                    "key": key,
                    "type": "json",
                    "display_name": key.rsplit(".", 1)[-1],
                    "description": "",
                    "value": value,
                    "default": None,
                    "secret": secret,
                    "is_set": True,
                    "options": [],
                    "min": None,
                    "max": None,
                    "step": None,
                    "required": False,
                    "placeholder": "",
                }
            )
        order = {name: i for i, name in enumerate(CATEGORY_ORDER)}
        categories: list[dict[str, Any]] = []
        for name in sorted(groups, key=lambda n: (order.get(n, 100), n)):
            items = sorted(groups[name], key=lambda s: str(s["key"]))
            categories.append({"name": name, "settings": items})
        return ok({"categories": categories})

    def _describe(self, d: ConfigDef) -> dict[str, Any]:
        config = self.ctx.config
        value = config.get(d.key)
        try:
            kind = base_type(d.type)
        except ValueError:
            kind = "string"
        if d.type in ("text",):
            kind = "text"
        return {
            "key": d.key,
            "type": kind,
            "display_name": d.display_name or d.key,
            "description": d.description,
            "value": config.masked(d.key, value) if d.is_secret else value,
            "default": config.masked(d.key, d.default) if d.is_secret else d.default,
            "secret": d.is_secret,
            "is_set": config.has(d.key),
            "options": list(d.options),
            "min": d.min,
            "max": d.max,
            "step": d.step,
            "required": d.required,
            "placeholder": d.placeholder,
        }

    async def put_settings(self, request: Request) -> Response:
        body = await read_json(request)
        if isinstance(body, dict) and isinstance(body.get("values"), dict) and len(body) == 1:
            body = body["values"]
        if not isinstance(body, dict) or not body:
            raise ApiError(400, Msg('send a JSON object of settings: {{"key": value, ...}}'))
        config = self.ctx.config
        errors: dict[str, str] = {}
        writes: dict[str, Any] = {}
        for key, value in body.items():
            try:
                if key in ENV_SECRET_KEYS:  # the masked env values this page was given go back as they were
                    value = unmask_env(value, config.get(key))
                checked = self._check_setting(key, value)
            except ValueError as exc:
                errors[key] = message_of(exc)
                continue
            if checked is not _UNCHANGED:
                writes[key] = value
        if errors:
            raise ApiError(400, Msg("nothing was saved: some settings are invalid"), errors=errors)
        saved: dict[str, Any] = {}
        for key, value in writes.items():
            try:
                stored = config.set(key, value)
            except ConfigError as exc:  # checked above; only a disk error gets here
                errors[key] = exc.message
                continue
            saved[key] = config.masked(key, stored)
        if errors:
            raise ApiError(500, Msg("some settings could not be written"), errors=errors, saved=saved)
        if saved:
            log.info("web UI changed settings: %s", ", ".join(sorted(saved)))
        return ok({"saved": saved})

    def _check_setting(self, key: str, value: Any) -> Any:
        """The value as it would be stored; ValueError with the message for the user."""
        config = self.ctx.config
        if key in READ_ONLY:
            raise ValueError(Msg("read-only here: {reason}", reason=READ_ONLY[key]))
        try:
            d = config.get_def(key)
        except ConfigError as exc:
            raise ValueError(exc.message) from None
        if d is not None and d.hidden:
            raise ValueError(Msg("this setting cannot be changed here"))
        if d is not None and d.is_secret and isinstance(value, str) and value == config.masked(key, config.get(key)):
            return _UNCHANGED  # the form sent the masked value back untouched
        if d is None:
            if not config.has(key):
                keys = [x.key for x in config.defs()]
                close = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
                raise ValueError(Msg('unknown setting; did you mean "{close}"?', close=close[0]) if close
                                 else Msg("unknown setting"))
            return value
        return coerce(d, value)

    # ------------------------------------------------------------ events
    async def events(self, request: Request) -> Response:
        if self.ctx.streams.full():
            raise ApiError(503, Msg("too many open streams; try again shortly"))
        raw_types = request.query_params.get("types", "")
        types = [t.strip() for t in raw_types.split(",") if t.strip()] or None
        header = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
        last_id = parse_last_event_id(header)
        if not header and request.query_params.get("since") == "now":
            ring = self.ctx.daemon.events.recent(0)
            last_id = ring[-1].id if ring else 0
        stream = event_stream(self.ctx.daemon.events, self.ctx.streams, last_id=last_id, types=types)
        return StreamingResponse(stream, media_type="text/event-stream", headers=SSE_HEADERS)


_UNCHANGED: Any = object()
SOURCE_BODY: dict[str, Any] = {
    "name": {"type": "string"},
    "adapter": {"type": "string"},
    "base_url": {"type": "string"},
    "model": {"type": "string"},
    "api_key": {"type": "string"},
    "context_window": {"type": "integer"},
    "thinking_enabled": {"type": "boolean"},
}


def _source_fields(body: dict[str, Any]) -> dict[str, Any]:
    """The source form's fields, each a bounded string or a plain number/bool (a clear 400 otherwise)."""
    out: dict[str, Any] = {"name": field_str(body, "name", max_len=200)}
    for key in EDITABLE_FIELDS:
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, str):
            out[key] = field_str(body, key, required=False, max_len=2000)
        elif isinstance(value, bool | int) and key in ("context_window", "thinking_enabled"):
            out[key] = value
        else:
            raise ApiError(400, Msg("{key}: expected text", key=key), field=key)
    return out


# settings whose JSON holds MCP servers: their env values (API keys) are shown masked, like secrets
ENV_SECRET_KEYS = frozenset({"plugin.mcp.servers"})
ENV_MASK = "••••••"


def _server_specs(data: Any) -> list[tuple[str, dict[str, Any]]]:
    """(name, entry) of our list form or of a Claude Desktop ``mcpServers`` object; entries are not copies."""
    if isinstance(data, dict):
        inner = data.get("mcpServers", data)
        return [(str(n), v) for n, v in inner.items() if isinstance(v, dict)] if isinstance(inner, dict) else []
    if isinstance(data, list):
        return [(str(v.get("name", "")), v) for v in data if isinstance(v, dict)]
    return []


def _decoded(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return copy.deepcopy(value)


def mask_env(value: Any) -> Any:
    """``value`` with every server's env values replaced by a mask (in the same JSON text or structure)."""
    data = _decoded(value)
    if data is None:
        return value
    for _, spec in _server_specs(data):
        if isinstance(spec.get("env"), dict):
            spec["env"] = dict.fromkeys(spec["env"], ENV_MASK)
    return json.dumps(data, ensure_ascii=False) if isinstance(value, str) else data


def unmask_env(value: Any, stored: Any) -> Any:
    """A masked env value sent back is the stored one of the same server and variable; ValueError if there is none."""
    data = _decoded(value)
    if data is None:
        return value
    known = {name: spec.get("env") for name, spec in _server_specs(_decoded(stored))}
    for name, spec in _server_specs(data):
        env = spec.get("env")
        if not isinstance(env, dict):
            continue
        for var, text in env.items():
            if text != ENV_MASK:
                continue
            before = known.get(name)
            if not isinstance(before, dict) or var not in before:
                raise ValueError(Msg("server {name!r}: type the value of {var} again (it was shown masked)", name=name, var=var))
            env[var] = before[var]
    return json.dumps(data, ensure_ascii=False) if isinstance(value, str) else data


def _translate(item: dict[str, Any]) -> None:
    """The Chinese label and help of a setting where there is one (the English stays otherwise)."""
    key = str(item["key"])
    found = ZH.get(key)
    if found is None and key.startswith(SOURCE_PREFIX):
        source, _, field = key[len(SOURCE_PREFIX):].rpartition(".")
        label = SOURCE_FIELDS_ZH.get(field)
        found = (f"{source}：{label[0]}", label[1]) if label else None
    if found is not None:
        item["display_name"], item["description"] = found


def _category(key: str, category: str) -> str:
    if key.startswith("plugin."):
        plugin = key.split(".", 2)[1]
        return category if category == plugin else f"plugin:{plugin}"
    if key.startswith("core.llm.sources."):
        return "llm"
    return category or "other"
