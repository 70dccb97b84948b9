"""Plugins, memory, knowledge and adapters over HTTP.

Every subsystem is a typed part of the :class:`~homeagent.webui.host.WebHost`
the daemon built, so each call here is one real method mypy has checked;
a route answers 501 only for a part the daemon may run without (the media
store, in ``media.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
import shutil
import tempfile
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import Response

from homeagent.msg import Msg, message_of
from homeagent.plugins.registry import PluginError
from homeagent.providers.adapter import AdapterError
from homeagent.webui.common import ApiError, Op, WebContext, field_str, jsonable, ok, query_int, read_object
from homeagent.webui.host import AdapterFiles, PluginManager, WebHost
from homeagent.webui.lang import localized, request_lang

if TYPE_CHECKING:
    from homeagent.memory.graph import Entity, Recall

log = logging.getLogger("homeagent.webui")

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
ADAPTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
MAX_ADAPTER_BYTES = 512 * 1024
MAX_KNOWLEDGE_BYTES = 10 * 1024 * 1024
PLUGIN_ERRORS: tuple[type[Exception], ...] = (PluginError, ValueError, LookupError)
"""What the plugin manager raises for a request it cannot do: answered 400 (or 404 for an unknown name)."""
INSTALL_ERRORS: tuple[type[Exception], ...] = (*PLUGIN_ERRORS, OSError)


def _name(request: Request, pattern: re.Pattern[str] = NAME) -> str:
    name = str(request.path_params.get("name", ""))
    if not pattern.match(name) or ".." in name:
        raise ApiError(400, Msg("invalid name {name!r}", name=name))
    return name


def _entry_name(name: str) -> str:
    """A knowledge entry name (any script): one path segment, no leading dot, no control characters."""
    name = name.strip()
    if (
        not name
        or len(name) > 100
        or name.startswith(".")
        or "/" in name
        or "\\" in name
        or any(unicodedata.category(ch)[0] == "C" for ch in name)
    ):
        raise ApiError(
            400, Msg("invalid knowledge entry name {name!r}: one name, no '/', not starting with '.'", name=name[:100]),
            field="name",
        )
    return name


def _plugin_api_error(name: str, exc: Exception) -> ApiError:
    message = message_of(exc)
    if not isinstance(message, Msg):  # a KeyError's str() is the quoted key
        message = message.strip("'\"") or type(exc).__name__
    status = 404 if isinstance(exc, LookupError) or message.startswith("no plugin named") else 400
    return ApiError(status, message, plugin=name)


def graph_view(recall: Recall) -> dict[str, Any]:
    """A recall as the graph page draws it: nodes (entities) and labelled edges (current facts)."""
    nodes: dict[str, dict[str, Any]] = {}

    def node(name: str, entity: Entity | None = None) -> str:
        if name not in nodes:
            nodes[name] = {"id": name, "label": name, "type": "", "mentions": 0}
        if entity is not None:
            nodes[name]["type"] = entity.type or nodes[name]["type"]
            nodes[name]["mentions"] = entity.mention_count
        return name

    for entity in recall.entities:
        if entity.name:
            node(entity.name, entity)
    edges: list[dict[str, Any]] = []
    for relation in recall.relations:
        if not relation.subject or not relation.object:
            continue
        edge: dict[str, Any] = {
            "source": node(relation.subject),
            "target": node(relation.object),
            "label": relation.relation,
        }
        shown = relation.to_dict()
        for extra in ("valid_from", "valid_to", "sentence", "confidence"):
            if shown.get(extra) is not None:
                edge[extra] = shown[extra]
        edges.append(edge)
    return {"nodes": list(nodes.values()), "edges": edges}


class ManageAPI:
    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx

    @property
    def host(self) -> WebHost:
        return self.ctx.daemon

    def ops(self) -> list[Op]:
        name_body = {
            "type": "object",
            "required": ["name", "content"],
            "properties": {"name": {"type": "string"}, "content": {"type": "string"}},
        }
        return [
            Op("GET", "/api/v1/plugins", self.plugins, "Installed plugins with their state and health", "plugins"),
            Op(
                "POST",
                "/api/v1/plugins",
                self.plugin_install,
                "Install a .hmap or .zip package (multipart field 'file'), or JSON {\"path\": folder or file here}",
                "plugins",
                form={"type": "object", "properties": {"file": {"type": "string", "format": "binary"}}},
                body={"type": "object", "required": ["path"], "properties": {"path": {"type": "string"}}},
            ),
            Op("GET", "/api/v1/plugins/{name}", self.plugin_info, "One plugin's details", "plugins"),
            Op("DELETE", "/api/v1/plugins/{name}", self.plugin_remove, "Remove a plugin", "plugins"),
            Op("POST", "/api/v1/plugins/{name}/enable", self.plugin_enable, "Enable a plugin", "plugins"),
            Op("POST", "/api/v1/plugins/{name}/disable", self.plugin_disable, "Disable a plugin", "plugins"),
            Op("POST", "/api/v1/plugins/{name}/reload", self.plugin_reload, "Reload a plugin", "plugins"),
            Op("GET", "/api/v1/memory/stats", self.memory_stats, "Counts of every memory layer", "memory"),
            Op(
                "GET",
                "/api/v1/memory/context",
                self.memory_context,
                "The context window (L1) timeline",
                "memory",
                query=("limit",),
            ),
            Op(
                "GET",
                "/api/v1/memory/documents",
                self.memory_documents,
                "Search the document store (L2)",
                "memory",
                query=("q", "limit"),
            ),
            Op(
                "GET",
                "/api/v1/memory/graph",
                self.memory_graph,
                "Graph neighbourhood (L3) as nodes and edges",
                "memory",
                query=("q", "depth"),
            ),
            Op(
                "GET",
                "/api/v1/memory/search",
                self.memory_search,
                "Search every memory layer",
                "memory",
                query=("q", "limit"),
            ),
            Op("GET", "/api/v1/knowledge", self.knowledge_list, "Knowledge base entries", "knowledge"),
            Op(
                "POST",
                "/api/v1/knowledge",
                self.knowledge_save,
                "Create or replace an entry",
                "knowledge",
                body=name_body,
            ),
            Op(
                "GET",
                "/api/v1/knowledge/search",
                self.knowledge_search,
                "Search the knowledge base",
                "knowledge",
                query=("q", "limit"),
            ),
            Op("GET", "/api/v1/knowledge/{name}", self.knowledge_get, "One entry's content", "knowledge"),
            Op("DELETE", "/api/v1/knowledge/{name}", self.knowledge_delete, "Delete an entry", "knowledge"),
            Op("GET", "/api/v1/adapters", self.adapters, "LLM adapters (built-in and your own)", "adapters"),
            Op("GET", "/api/v1/adapters/{name}", self.adapter_get, "An adapter's Lua source", "adapters"),
            Op(
                "PUT",
                "/api/v1/adapters/{name}",
                self.adapter_save,
                "Save your own adapter (checked before it is written)",
                "adapters",
                body={"type": "object", "required": ["code"], "properties": {"code": {"type": "string"}}},
            ),
            Op("DELETE", "/api/v1/adapters/{name}", self.adapter_delete, "Delete your own adapter", "adapters"),
        ]

    # ------------------------------------------------------------ plugins
    @property
    def _plugins(self) -> PluginManager:
        return self.host.plugins

    async def plugins(self, request: Request) -> Response:
        return ok({"plugins": self._plugins.list()})

    async def plugin_info(self, request: Request) -> Response:
        name = _name(request)
        try:  # the MCP page shows the mcp plugin's health problems (Msg) in the page's language
            return ok(localized(self._plugins.info(name), request_lang(request.headers)))
        except PLUGIN_ERRORS as exc:
            raise _plugin_api_error(name, exc) from None

    async def _plugin_action(self, request: Request, action: str) -> Response:
        name = _name(request)
        plugins = self._plugins
        actions = {
            "enable": plugins.enable,
            "disable": plugins.disable,
            "reload": plugins.reload_one,
            "remove": plugins.remove,
        }
        try:
            result = await actions[action](name)
        except PLUGIN_ERRORS as exc:
            raise _plugin_api_error(name, exc) from None
        log.info("web UI: plugin %s: %s", name, action)
        return ok({"ok": True, "name": name, "result": result})

    async def plugin_enable(self, request: Request) -> Response:
        return await self._plugin_action(request, "enable")

    async def plugin_disable(self, request: Request) -> Response:
        return await self._plugin_action(request, "disable")

    async def plugin_reload(self, request: Request) -> Response:
        return await self._plugin_action(request, "reload")

    async def plugin_remove(self, request: Request) -> Response:
        return await self._plugin_action(request, "remove")

    async def plugin_install(self, request: Request) -> Response:
        cap = self.ctx.config.get_int("plugin.webui.max_upload_mb", 64) * 1024 * 1024
        upgrade = request.query_params.get("upgrade", "") in ("1", "true", "yes")
        if request.headers.get("content-type", "").startswith("application/json"):
            return await self._install_path(request, upgrade)
        staging = self.ctx.uploads_dir / ".plugins" / secrets.token_hex(12)
        await asyncio.to_thread(staging.mkdir, mode=0o700, parents=True, exist_ok=True)
        path = staging / "upload.hmap"
        try:
            filename = await self._receive_package(request, path, cap)
            stem = re.sub(r"[^A-Za-z0-9_-]+", "-", Path(filename).stem).strip("-_")[:64]
            if stem:  # a zip holding only a SKILL.md without a name is named after the uploaded file
                named = staging / f"{stem}.hmap"
                await asyncio.to_thread(path.rename, named)
                path = named
            try:
                result = await self._plugins.install(str(path), upgrade=upgrade)
            except INSTALL_ERRORS as exc:
                raise ApiError(400, Msg("cannot install: {reason}", reason=message_of(exc))) from None
        finally:
            with contextlib.suppress(OSError):
                await asyncio.to_thread(shutil.rmtree, staging)
        log.info("web UI installed a plugin package")
        return ok({"ok": True, "installed": result}, status=201)

    async def _install_path(self, request: Request, upgrade: bool) -> Response:
        """Install from a folder, .hmap or .zip on the daemon's machine (the owner's own files)."""
        body = await read_object(request)
        source = field_str(body, "path", max_len=4096).strip()
        if not (source.startswith("/") or source.startswith("~/")):
            raise ApiError(400, Msg("give the full path of a plugin folder, .hmap or .zip on this machine"), field="path")
        try:
            result = await self._plugins.install(source, upgrade=upgrade)
        except INSTALL_ERRORS as exc:
            raise ApiError(400, Msg("cannot install: {reason}", reason=message_of(exc))) from None
        log.info("web UI installed a plugin from %s", source)
        return ok({"ok": True, "installed": result}, status=201)

    async def _receive_package(self, request: Request, dest: Path, cap: int) -> str:
        """Write the uploaded package to ``dest``; returns the file name the browser gave (or "")."""
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > cap + 1024 * 1024:
            raise ApiError(413, Msg("package too large (limit {mb} MB)", mb=cap // (1024 * 1024)))
        ctype = request.headers.get("content-type", "")
        if ctype.startswith("multipart/form-data"):
            try:
                form = await request.form(max_files=1, max_fields=5)
            except MultiPartException as exc:
                raise ApiError(400, Msg("malformed upload: {reason}", reason=exc.message)) from None
            try:
                upload = form.get("file")
                if not isinstance(upload, UploadFile):
                    raise ApiError(400, Msg("no package in the upload (field 'file')"))
                if (upload.size or 0) > cap:
                    raise ApiError(413, Msg("package too large (limit {mb} MB)", mb=cap // (1024 * 1024)))

                def copy() -> None:
                    upload.file.seek(0)
                    with open(dest, "xb") as out:
                        shutil.copyfileobj(upload.file, out, 1024 * 1024)

                await asyncio.to_thread(copy)
                return str(upload.filename or "")
            finally:
                await form.close()
        size = 0
        chunks: list[bytes] = []
        async for chunk in request.stream():
            size += len(chunk)
            if size > cap:
                raise ApiError(413, Msg("package too large (limit {mb} MB)", mb=cap // (1024 * 1024)))
            chunks.append(chunk)
        if not size:
            raise ApiError(400, Msg("send the .hmap package as multipart field 'file' or as the request body"))
        await asyncio.to_thread(dest.write_bytes, b"".join(chunks))
        return ""

    # ------------------------------------------------------------ memory
    async def memory_stats(self, request: Request) -> Response:
        host = self.host
        return ok({
            "context": host.context.stats(),
            "documents": await host.documents.astats(),
            "graph": await host.graph.introspect(),
            "knowledge": {"entries": len(await host.knowledge.entries())},
        })

    async def memory_context(self, request: Request) -> Response:
        context = self.host.context
        limit = query_int(request, "limit", 200, lo=1, hi=5000)
        events = context.timeline()[-limit:]
        return ok({"events": jsonable(events), "total": len(context)})

    async def memory_documents(self, request: Request) -> Response:
        docs = self.host.documents
        q = request.query_params.get("q", "").strip()
        limit = query_int(request, "limit", 20, lo=1, hi=200)
        found = await docs.aquery(q, limit, touch=False) if q else await docs.arecent(limit)
        return ok({"documents": jsonable(found)})

    async def _graph(self, q: str, depth: int) -> dict[str, Any]:
        graph = self.host.graph
        if q:
            keywords = [k for k in re.split(r"[,\s，、]+", q) if k][:20]
            return graph_view(await graph.recall(keywords, depth))
        # no query: the neighbourhood of the most mentioned entities
        names = [e.name for e in await graph.hot_entities(30) if e.name]
        if not names:
            return {"nodes": [], "edges": []}
        return graph_view(await graph.recall(names, 1))

    async def memory_graph(self, request: Request) -> Response:
        q = request.query_params.get("q", "").strip()
        depth = query_int(request, "depth", 2, lo=1, hi=4)
        return ok(await self._graph(q, depth))

    async def memory_search(self, request: Request) -> Response:
        q = request.query_params.get("q", "").strip()
        if not q:
            raise ApiError(400, Msg("query parameter 'q' is required"))
        limit = query_int(request, "limit", 10, lo=1, hi=100)
        host = self.host
        needle = q.lower()
        context = [
            e for e in host.context.timeline() if needle in e.input.lower() or needle in e.response.lower()
        ][-limit:]
        return ok({
            "context": jsonable(context),
            "documents": jsonable(await host.documents.aquery(q, limit, touch=False)),
            "graph": await self._graph(q, 1),
            "knowledge": jsonable(await host.knowledge.search(q, limit)),
        })

    # ------------------------------------------------------------ knowledge
    async def knowledge_list(self, request: Request) -> Response:
        return ok({"entries": jsonable(await self.host.knowledge.entries())})

    async def knowledge_search(self, request: Request) -> Response:
        q = request.query_params.get("q", "").strip()
        if not q:
            raise ApiError(400, Msg("query parameter 'q' is required"))
        limit = query_int(request, "limit", 10, lo=1, hi=100)
        return ok({"results": jsonable(await self.host.knowledge.search(q, limit))})

    async def knowledge_get(self, request: Request) -> Response:
        name = _entry_name(str(request.path_params.get("name", "")))
        try:
            content = await self.host.knowledge.get(name)
        except ValueError as exc:  # a name the knowledge base refuses (KnowledgeError)
            raise ApiError(400, message_of(exc), field="name") from None
        if content is None:
            raise ApiError(404, Msg("no knowledge entry named {name!r}", name=name))
        return ok({"name": name, "content": content})

    async def knowledge_save(self, request: Request) -> Response:
        body = await read_object(request)
        name = _entry_name(field_str(body, "name", max_len=100))
        content = field_str(body, "content", max_len=MAX_KNOWLEDGE_BYTES)
        try:
            result = await self.host.knowledge.add(name, content)
        except ValueError as exc:
            raise ApiError(400, message_of(exc)) from None
        return ok({"ok": True, "name": name, "result": result})

    async def knowledge_delete(self, request: Request) -> Response:
        name = _entry_name(str(request.path_params.get("name", "")))
        try:
            deleted = await self.host.knowledge.delete(name)
        except ValueError as exc:  # e.g. the entry is a symbolic link: the message says what to do
            raise ApiError(400, message_of(exc)) from None
        if not deleted:
            raise ApiError(404, Msg("no knowledge entry named {name!r}", name=name))
        return ok({"ok": True, "name": name})

    # ------------------------------------------------------------ adapters
    @property
    def _loader(self) -> AdapterFiles:
        return self.host.adapters

    async def adapters(self, request: Request) -> Response:
        infos = await asyncio.to_thread(self._loader.info)
        return ok({"adapters": jsonable(infos), "user_dir": str(self._user_dir())})

    def _user_dir(self) -> Path:
        return self._loader.user_dir or self.host.paths.adapters

    def _source_path(self, name: str) -> tuple[Path, bool] | None:
        user = self._user_dir() / f"{name}.lua"
        if user.is_file():
            return user, False
        builtin = self._loader.builtin_dir / f"{name}.lua"
        if builtin.is_file():
            return builtin, True
        return None

    async def adapter_get(self, request: Request) -> Response:
        name = _name(request, ADAPTER_NAME)
        found = await asyncio.to_thread(self._source_path, name)
        if found is None:
            raise ApiError(404, Msg("no adapter named {name!r}", name=name))
        path, builtin = found
        code = await asyncio.to_thread(path.read_text, encoding="utf-8", errors="replace")
        return ok({"name": name, "code": code, "builtin": builtin, "path": str(path)})

    async def adapter_save(self, request: Request) -> Response:
        name = _name(request, ADAPTER_NAME)
        body = await read_object(request)
        code = field_str(body, "code", max_len=MAX_ADAPTER_BYTES)
        loader = self._loader
        problem = await asyncio.to_thread(_check_adapter, loader, name, code)
        if problem:
            raise ApiError(400, problem[0], location=problem[1])
        dest = self._user_dir() / f"{name}.lua"
        await asyncio.to_thread(_write_atomic, dest, code)
        loader.forget()  # the next LLM call picks the file up without waiting for the recheck interval
        log.info("web UI saved adapter %s", dest)
        return ok({"ok": True, "name": name, "path": str(dest)})

    async def adapter_delete(self, request: Request) -> Response:
        name = _name(request, ADAPTER_NAME)
        path = self._user_dir() / f"{name}.lua"
        if not await asyncio.to_thread(path.is_file):
            raise ApiError(404, Msg("no adapter of yours named {name!r} (built-in adapters cannot be deleted)", name=name))
        await asyncio.to_thread(path.unlink)
        self._loader.forget()
        return ok({"ok": True, "name": name})


def _check_adapter(loader: AdapterFiles, name: str, code: str) -> tuple[str, str] | None:
    """(message, location) when ``code`` does not load as an adapter; None when it does."""
    with tempfile.TemporaryDirectory(prefix="homeagent-adapter-") as tmp:
        path = Path(tmp) / f"{name}.lua"
        path.write_text(code, encoding="utf-8")
        try:
            loader.check_file(path)
        except AdapterError as exc:
            return message_of(exc), exc.location
    return None


def _write_atomic(dest: Path, text: str) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{secrets.token_hex(4)}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(dest)
