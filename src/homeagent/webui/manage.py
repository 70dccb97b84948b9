"""Plugins, memory, knowledge and adapters over HTTP.

These subsystems are built by other parts of HomeAgent and may be absent from
a given daemon. Each is looked up at request time (on the daemon, its plugin
services, or its memory object), its methods are called by the first of a
few names it has, and a missing subsystem or method answers 501 saying what
is missing, so the API works as soon as the subsystem is wired and never
crashes before.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import logging
import re
import secrets
import shutil
import tempfile
import unicodedata
from pathlib import Path
from typing import Any

from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import Response

from homeagent.webui.common import ApiError, Op, WebContext, field_str, jsonable, ok, query_int, read_object

log = logging.getLogger("homeagent.webui")

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
ADAPTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
MAX_ADAPTER_BYTES = 512 * 1024
MAX_KNOWLEDGE_BYTES = 10 * 1024 * 1024

_CANDIDATES: dict[str, tuple[str, ...]] = {
    "plugins": ("plugins", "plugin_registry", "registry"),
    "context": ("context", "memory_context", "l1"),
    "documents": ("docs", "documents", "doc_store", "l2"),
    "graph": ("graph", "memory_graph", "l3"),
    "knowledge": ("knowledge", "knowledge_base", "kb"),
}


def find_subsystems(daemon: Any) -> dict[str, Any]:
    """Each optional subsystem of ``daemon`` (None where it has none)."""
    places = [daemon]
    for holder in ("services", "plugin_services", "memory", "memory_system"):
        obj = getattr(daemon, holder, None)
        if obj is not None:
            places.append(obj)
    found: dict[str, Any] = {}
    for kind, names in _CANDIDATES.items():
        found[kind] = None
        for place in places:
            for name in names:
                obj = getattr(place, name, None)
                if obj is not None and not isinstance(obj, int | str | bool):
                    found[kind] = obj
                    break
            if found[kind] is not None:
                break
    llm = getattr(daemon, "llm", None)
    found["adapters"] = getattr(llm, "adapters", None)
    return found


def _need(daemon: Any, kind: str, label: str) -> Any:
    obj = find_subsystems(daemon)[kind]
    if obj is None:
        raise ApiError(501, f"{label} is not available in this daemon yet", missing=kind)
    return obj


async def call(
    obj: Any, label: str, names: tuple[str, ...], *args: Any, sync_in_thread: bool = True, **kwargs: Any
) -> Any:
    """Call the first method of ``names`` that ``obj`` has; sync ones run in a worker thread."""
    for name in names:
        fn = getattr(obj, name, None)
        if not callable(fn):
            continue
        if inspect.iscoroutinefunction(fn):
            return await fn(*args, **kwargs)
        if sync_in_thread:
            result = await asyncio.to_thread(fn, *args, **kwargs)
        else:
            result = fn(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result
    raise ApiError(501, f"{label} cannot {names[0].lstrip('a')} in this build", missing=f"{label}.{names[0]}")


def _name(request: Request, pattern: re.Pattern[str] = NAME) -> str:
    name = str(request.path_params.get("name", ""))
    if not pattern.match(name) or ".." in name:
        raise ApiError(400, f"invalid name {name!r}")
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
            400, f"invalid knowledge entry name {name[:100]!r}: one name, no '/', not starting with '.'", field="name"
        )
    return name


def _as_list(value: Any, key: str) -> list[Any]:
    value = jsonable(value)
    if isinstance(value, dict):
        value = value.get(key, value.get("items", []))
    return value if isinstance(value, list) else []


def _plugin_errors() -> tuple[type[Exception], ...]:
    """What the plugin manager raises for a request it cannot do (its own error class, when it has one)."""
    try:
        from homeagent.plugins.registry import PluginError
    except ImportError:
        return (ValueError, LookupError)
    return (PluginError, ValueError, LookupError)


def _plugin_api_error(name: str, exc: Exception) -> ApiError:
    message = str(exc).strip("'\"") or type(exc).__name__
    status = 404 if isinstance(exc, LookupError) or message.startswith("no plugin named") else 400
    return ApiError(status, message, plugin=name)


def graph_view(result: Any) -> dict[str, Any]:
    """Entities and relations in any of the shapes a graph may return, as nodes and edges."""
    data = jsonable(result)
    if isinstance(data, list) and len(data) == 2 and all(isinstance(x, list) for x in data):
        entities, relations = data
    elif isinstance(data, dict):
        entities = data.get("entities") or data.get("nodes") or []
        relations = data.get("relations") or data.get("edges") or []
    else:
        entities, relations = [], []
    nodes: dict[str, dict[str, Any]] = {}

    def node(name: Any, extra: dict[str, Any] | None = None) -> str:
        label = str(name)
        if label not in nodes:
            nodes[label] = {"id": label, "label": label, "type": "", "mentions": 0}
        if extra:
            nodes[label]["type"] = str(extra.get("type") or extra.get("entity_type") or nodes[label]["type"])
            nodes[label]["mentions"] = int(extra.get("mention_count") or extra.get("mentions") or 0)
        return label

    for e in entities:
        if isinstance(e, dict):
            name = e.get("name") or e.get("label") or e.get("id")
            if name:
                node(name, e)
        elif e:
            node(e)
    edges: list[dict[str, Any]] = []
    for r in relations:
        if not isinstance(r, dict):
            continue
        src = r.get("source_name") or r.get("subject") or r.get("source") or r.get("from")
        dst = r.get("target_name") or r.get("object") or r.get("target") or r.get("to")
        label = r.get("relation_type") or r.get("relation") or r.get("label") or r.get("type") or ""
        if not src or not dst:
            continue
        edge = {"source": node(src), "target": node(dst), "label": str(label)}
        for extra in ("valid_from", "valid_to", "sentence", "confidence"):
            if r.get(extra) is not None:
                edge[extra] = r[extra]
        edges.append(edge)
    return {"nodes": list(nodes.values()), "edges": edges}


class ManageAPI:
    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx

    @property
    def daemon(self) -> Any:
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
    def _plugins(self) -> Any:
        return _need(self.daemon, "plugins", "the plugin manager")

    async def plugins(self, request: Request) -> Response:
        registry = self._plugins()
        result = await call(registry, "plugins", ("list", "infos", "list_plugins", "status"), sync_in_thread=False)
        return ok({"plugins": _as_list(result, "plugins")})

    async def plugin_info(self, request: Request) -> Response:
        name = _name(request)
        registry = self._plugins()
        try:
            info = await call(registry, "plugins", ("info", "get_info", "describe"), name, sync_in_thread=False)
        except _plugin_errors() as exc:
            raise _plugin_api_error(name, exc) from None
        if info is None:
            raise ApiError(404, f"no plugin named {name!r}")
        return ok(info)

    async def _plugin_action(self, request: Request, names: tuple[str, ...]) -> Response:
        name = _name(request)
        registry = self._plugins()
        try:
            result = await call(registry, "plugins", names, name, sync_in_thread=False)
        except _plugin_errors() as exc:
            raise _plugin_api_error(name, exc) from None
        log.info("web UI: plugin %s: %s", name, names[0])
        return ok({"ok": True, "name": name, "result": result})

    async def plugin_enable(self, request: Request) -> Response:
        return await self._plugin_action(request, ("enable",))

    async def plugin_disable(self, request: Request) -> Response:
        return await self._plugin_action(request, ("disable",))

    async def plugin_reload(self, request: Request) -> Response:
        return await self._plugin_action(request, ("reload_one", "reload", "restart"))

    async def plugin_remove(self, request: Request) -> Response:
        return await self._plugin_action(request, ("remove", "uninstall"))

    async def plugin_install(self, request: Request) -> Response:
        registry = self._plugins()
        cap = self.ctx.config.get_int("plugin.webui.max_upload_mb", 64) * 1024 * 1024
        upgrade = request.query_params.get("upgrade", "") in ("1", "true", "yes")
        extra = {"upgrade": True} if upgrade else {}
        if request.headers.get("content-type", "").startswith("application/json"):
            return await self._install_path(request, registry, extra)
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
            errors: tuple[type[Exception], ...] = (*_plugin_errors(), OSError)
            try:
                result = await call(
                    registry,
                    "plugins",
                    ("install", "install_package", "install_hmap"),
                    str(path),
                    sync_in_thread=False,
                    **extra,
                )
            except errors as exc:
                raise ApiError(400, f"cannot install: {exc}") from None
        finally:
            with contextlib.suppress(OSError):
                await asyncio.to_thread(shutil.rmtree, staging)
        log.info("web UI installed a plugin package")
        return ok({"ok": True, "installed": result}, status=201)

    async def _install_path(self, request: Request, registry: Any, extra: dict[str, Any]) -> Response:
        """Install from a folder, .hmap or .zip on the daemon's machine (the owner's own files)."""
        body = await read_object(request)
        source = field_str(body, "path", max_len=4096).strip()
        if not (source.startswith("/") or source.startswith("~/")):
            raise ApiError(400, "give the full path of a plugin folder, .hmap or .zip on this machine", field="path")
        errors: tuple[type[Exception], ...] = (*_plugin_errors(), OSError)
        try:
            result = await call(registry, "plugins", ("install",), source, sync_in_thread=False, **extra)
        except errors as exc:
            raise ApiError(400, f"cannot install: {exc}") from None
        log.info("web UI installed a plugin from %s", source)
        return ok({"ok": True, "installed": result}, status=201)

    async def _receive_package(self, request: Request, dest: Path, cap: int) -> str:
        """Write the uploaded package to ``dest``; returns the file name the browser gave (or "")."""
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > cap + 1024 * 1024:
            raise ApiError(413, f"package too large (limit {cap // (1024 * 1024)} MB)")
        ctype = request.headers.get("content-type", "")
        if ctype.startswith("multipart/form-data"):
            try:
                form = await request.form(max_files=1, max_fields=5)
            except MultiPartException as exc:
                raise ApiError(400, f"malformed upload: {exc.message}") from None
            try:
                upload = form.get("file")
                if not isinstance(upload, UploadFile):
                    raise ApiError(400, "no package in the upload (field 'file')")
                if (upload.size or 0) > cap:
                    raise ApiError(413, f"package too large (limit {cap // (1024 * 1024)} MB)")

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
                raise ApiError(413, f"package too large (limit {cap // (1024 * 1024)} MB)")
            chunks.append(chunk)
        if not size:
            raise ApiError(400, "send the .hmap package as multipart field 'file' or as the request body")
        await asyncio.to_thread(dest.write_bytes, b"".join(chunks))
        return ""

    # ------------------------------------------------------------ memory
    async def memory_stats(self, request: Request) -> Response:
        found = find_subsystems(self.daemon)
        out: dict[str, Any] = {}
        if found["context"] is not None:
            out["context"] = await call(found["context"], "context", ("stats",), sync_in_thread=False)
        if found["documents"] is not None:
            out["documents"] = await call(found["documents"], "documents", ("astats", "stats"))
        if found["graph"] is not None:
            out["graph"] = await call(found["graph"], "graph", ("aintrospect", "introspect", "stats"))
        if found["knowledge"] is not None:
            with contextlib.suppress(ApiError):
                out["knowledge"] = {
                    "entries": len(
                        _as_list(await call(found["knowledge"], "knowledge", ("alist", "list", "names")), "names")
                    )
                }
        if not out:
            raise ApiError(501, "memory is not available in this daemon yet", missing="memory")
        return ok(out)

    async def memory_context(self, request: Request) -> Response:
        context = _need(self.daemon, "context", "the context window")
        limit = query_int(request, "limit", 200, lo=1, hi=5000)
        events = await call(context, "context", ("timeline",), sync_in_thread=False)
        events = list(events)[-limit:]
        return ok({"events": jsonable(events), "total": len(context) if hasattr(context, "__len__") else len(events)})

    async def memory_documents(self, request: Request) -> Response:
        docs = _need(self.daemon, "documents", "the document store")
        q = request.query_params.get("q", "").strip()
        limit = query_int(request, "limit", 20, lo=1, hi=200)
        if q:
            try:
                found = await call(docs, "documents", ("aquery",), q, limit, touch=False)
            except TypeError:
                found = await call(docs, "documents", ("aquery", "query"), q, limit)
        elif callable(getattr(docs, "recent", None)):
            found = await call(docs, "documents", ("recent",), limit)
        else:
            found = await call(docs, "documents", ("iter_docs",), sync_in_thread=False)
            found = list(reversed(await asyncio.to_thread(_newest, found, limit)))
        return ok({"documents": jsonable(found)})

    async def _graph(self, q: str, depth: int) -> dict[str, Any]:
        graph = _need(self.daemon, "graph", "the knowledge graph")
        if q:
            keywords = [k for k in re.split(r"[,\s，、]+", q) if k][:20]
            result = await call(graph, "graph", ("arecall", "recall"), keywords, depth)
        elif any(callable(getattr(graph, n, None)) for n in ("overview", "sample")):
            result = await call(graph, "graph", ("overview", "sample"), 50)
        else:  # the neighbourhood of the most mentioned entities
            hot = jsonable(await call(graph, "graph", ("hot_entities",), 30))
            names = [str(e.get("name")) for e in hot if isinstance(e, dict) and e.get("name")]
            if not names:
                return {"nodes": [], "edges": []}
            result = await call(graph, "graph", ("arecall", "recall"), names, 1)
        return graph_view(result)

    async def memory_graph(self, request: Request) -> Response:
        q = request.query_params.get("q", "").strip()
        depth = query_int(request, "depth", 2, lo=1, hi=4)
        return ok(await self._graph(q, depth))

    async def memory_search(self, request: Request) -> Response:
        q = request.query_params.get("q", "").strip()
        if not q:
            raise ApiError(400, "query parameter 'q' is required")
        limit = query_int(request, "limit", 10, lo=1, hi=100)
        found = find_subsystems(self.daemon)
        out: dict[str, Any] = {}
        if found["context"] is not None:
            needle = q.lower()
            events = await call(found["context"], "context", ("timeline",), sync_in_thread=False)
            out["context"] = [
                e
                for e in jsonable(list(events))
                if needle in str(e.get("input", "")).lower() or needle in str(e.get("response", "")).lower()
            ][-limit:]
        if found["documents"] is not None:
            try:
                out["documents"] = jsonable(
                    await call(found["documents"], "documents", ("aquery",), q, limit, touch=False)
                )
            except TypeError:
                out["documents"] = jsonable(await call(found["documents"], "documents", ("aquery", "query"), q, limit))
        if found["graph"] is not None:
            with contextlib.suppress(ApiError):
                out["graph"] = await self._graph(q, 1)
        if found["knowledge"] is not None:
            with contextlib.suppress(ApiError):
                out["knowledge"] = jsonable(
                    await call(found["knowledge"], "knowledge", ("asearch", "search"), q, limit)
                )
        if not out:
            raise ApiError(501, "memory is not available in this daemon yet", missing="memory")
        return ok(out)

    # ------------------------------------------------------------ knowledge
    def _kb(self) -> Any:
        return _need(self.daemon, "knowledge", "the knowledge base")

    async def knowledge_list(self, request: Request) -> Response:
        result = await call(self._kb(), "knowledge", ("entries", "alist", "list", "names"))
        return ok({"entries": _as_list(result, "entries")})

    async def knowledge_search(self, request: Request) -> Response:
        q = request.query_params.get("q", "").strip()
        if not q:
            raise ApiError(400, "query parameter 'q' is required")
        limit = query_int(request, "limit", 10, lo=1, hi=100)
        return ok({"results": jsonable(await call(self._kb(), "knowledge", ("asearch", "search"), q, limit))})

    async def knowledge_get(self, request: Request) -> Response:
        name = _entry_name(str(request.path_params.get("name", "")))
        kb = self._kb()
        try:
            entry = await call(kb, "knowledge", ("aget", "get", "read"), name)
        except (KeyError, FileNotFoundError, LookupError):
            entry = None
        if entry is None:
            raise ApiError(404, f"no knowledge entry named {name!r}")
        if isinstance(entry, str):
            entry = {"name": name, "content": entry}
        return ok(entry)

    async def knowledge_save(self, request: Request) -> Response:
        body = await read_object(request)
        name = _entry_name(field_str(body, "name", max_len=100))
        content = field_str(body, "content", max_len=MAX_KNOWLEDGE_BYTES)
        try:
            result = await call(self._kb(), "knowledge", ("aadd", "add", "save"), name, content)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        return ok({"ok": True, "name": name, "result": result})

    async def knowledge_delete(self, request: Request) -> Response:
        name = _entry_name(str(request.path_params.get("name", "")))
        try:
            result = await call(self._kb(), "knowledge", ("adelete", "delete", "remove"), name)
        except (KeyError, FileNotFoundError, LookupError):
            raise ApiError(404, f"no knowledge entry named {name!r}") from None
        if result is False:
            raise ApiError(404, f"no knowledge entry named {name!r}")
        return ok({"ok": True, "name": name})

    # ------------------------------------------------------------ adapters
    def _loader(self) -> Any:
        return _need(self.daemon, "adapters", "the adapter loader")

    async def adapters(self, request: Request) -> Response:
        infos = await call(self._loader(), "adapters", ("info",))
        return ok({"adapters": jsonable(infos), "user_dir": str(self._user_dir())})

    def _user_dir(self) -> Path:
        loader = self._loader()
        return Path(getattr(loader, "user_dir", None) or self.ctx.daemon.paths.adapters)

    def _source_path(self, name: str) -> tuple[Path, bool] | None:
        loader = self._loader()
        user = self._user_dir() / f"{name}.lua"
        if user.is_file():
            return user, False
        builtin_dir = getattr(loader, "builtin_dir", None)
        if builtin_dir is not None and (Path(builtin_dir) / f"{name}.lua").is_file():
            return Path(builtin_dir) / f"{name}.lua", True
        return None

    async def adapter_get(self, request: Request) -> Response:
        name = _name(request, ADAPTER_NAME)
        found = await asyncio.to_thread(self._source_path, name)
        if found is None:
            raise ApiError(404, f"no adapter named {name!r}")
        path, builtin = found
        code = await asyncio.to_thread(path.read_text, encoding="utf-8", errors="replace")
        return ok({"name": name, "code": code, "builtin": builtin, "path": str(path)})

    async def adapter_save(self, request: Request) -> Response:
        name = _name(request, ADAPTER_NAME)
        body = await read_object(request)
        code = field_str(body, "code", max_len=MAX_ADAPTER_BYTES)
        loader = self._loader()
        problem = await asyncio.to_thread(_check_adapter, loader, name, code)
        if problem:
            raise ApiError(400, problem[0], location=problem[1])
        dest = self._user_dir() / f"{name}.lua"
        await asyncio.to_thread(_write_atomic, dest, code)
        _forget(loader)
        log.info("web UI saved adapter %s", dest)
        return ok({"ok": True, "name": name, "path": str(dest)})

    async def adapter_delete(self, request: Request) -> Response:
        name = _name(request, ADAPTER_NAME)
        path = self._user_dir() / f"{name}.lua"
        if not await asyncio.to_thread(path.is_file):
            raise ApiError(404, f"no adapter of yours named {name!r} (built-in adapters cannot be deleted)")
        await asyncio.to_thread(path.unlink)
        _forget(self._loader())
        return ok({"ok": True, "name": name})


def _forget(loader: Any) -> None:
    """A file just changed: the next LLM call picks it up without waiting for the recheck interval."""
    forget = getattr(loader, "forget", None)
    if callable(forget):
        forget()


def _newest(items: Any, n: int) -> list[Any]:
    """The last ``n`` of an iterable (consumed in a worker thread)."""
    return list(collections.deque(items, maxlen=n))


def _check_adapter(loader: Any, name: str, code: str) -> tuple[str, str] | None:
    """(message, location) when ``code`` does not load as an adapter; None when it does."""
    check_file = getattr(loader, "check_file", None)
    if not callable(check_file):
        return None
    with tempfile.TemporaryDirectory(prefix="homeagent-adapter-") as tmp:
        path = Path(tmp) / f"{name}.lua"
        path.write_text(code, encoding="utf-8")
        try:
            check_file(path)
        except Exception as exc:
            return str(exc), str(getattr(exc, "location", "") or "")
    return None


def _write_atomic(dest: Path, text: str) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{secrets.token_hex(4)}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(dest)
