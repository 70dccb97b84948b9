"""Run a Python plugin as a subprocess plugin: ``python -m homeagent.sdk.run DIR``.

``DIR`` is a plugin folder whose ``plugin.json`` names a Python entry
(``main.py``, or ``package.module:factory``) and ``"runtime": "process"``. The
same ``create_plugin(name, config)`` that the daemon would import in-process
is imported here and served over protocol v1 on stdin/stdout (see
docs/protocol.md), so a plugin moves between in-process and crash-isolated
by changing one manifest field.

A plugin can also be its own executable entry::

    #!/usr/bin/env python3
    from homeagent.sdk.run import run_plugin
    ...
    if __name__ == "__main__":
        run_plugin(create_plugin)

Before anything else runs, the protocol's pipes are moved to private file
descriptors: file descriptor 1 then points at stderr and 0 at /dev/null, so a
stray ``print()`` (or a child process, or a C library) can never corrupt a
frame; what it prints lands in the daemon's log instead. The plugin module is
imported before the handshake is answered, so its import time overlaps the
daemon's other start-up work; an import error is reported by ``plugin.init``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import inspect
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

from homeagent import __version__
from homeagent.sdk.api import Plugin, PluginFactory
from homeagent.sdk.protocol import PROTOCOL_VERSION, ErrorCode, Request, RPCError
from homeagent.sdk.remote import (
    TOOL_CALL,
    TOOL_ORIGIN,
    Endpoint,
    Handlers,
    RemoteEvent,
    RemoteSDK,
    changes_between,
    context_from,
    origin_from,
)
from homeagent.sdk.stageview import StageView  # the same permission checks as the host
from homeagent.sdk.types import Stage

__all__ = ["PluginRuntime", "load_factory", "main", "run_plugin"]

_log = logging.getLogger("homeagent.sdk.run")



async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


def _is_async(fn: Any) -> bool:
    call = type(fn).__call__ if callable(fn) else None
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


class PluginRuntime:
    """Serves one plugin over an :class:`Endpoint`: the host → plugin methods of protocol v1."""

    def __init__(
        self,
        endpoint: Endpoint,
        factory: PluginFactory | None,
        *,
        name: str,
        folder: Path | None = None,
        manifest: Mapping[str, Any] | None = None,
        load_error: BaseException | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.name = name
        self.folder = folder
        self.manifest = dict(manifest or {})
        self.handlers = Handlers()
        self._async: dict[Any, bool] = {}
        self.plugin: Plugin | None = None
        self.sdk: RemoteSDK | None = None
        self._factory = factory
        self._load_error = load_error
        self._tasks: dict[Any, asyncio.Task[None]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._done: asyncio.Event | None = None
        self._stopped = False
        self._methods: dict[str, Callable[[dict[str, Any]], Awaitable[Any]]] = {
            "handshake": self._handshake,
            "plugin.init": self._init,
            "plugin.start": self._start,
            "plugin.stop": self._stop,
            "tool.invoke": self._tool,
            "stage.invoke": self._stage,
            "output.invoke": self._output,
            "cleaner.invoke": self._cleaner,
            "ping": self._ping,
        }

    async def serve(self) -> None:
        """Run until the host stops the plugin or closes the pipe."""
        loop = asyncio.get_running_loop()
        self._done = asyncio.Event()
        self.endpoint.start(loop, self._on_request, self._on_eof)
        await self._done.wait()
        for task in list(self._background):
            task.cancel()

    def _on_eof(self) -> None:
        if self._done is None or self._done.is_set():
            return
        task = asyncio.get_running_loop().create_task(self._shutdown())
        self._background.add(task)

    async def _shutdown(self) -> None:
        await self._stop_plugin()
        if self._done is not None:
            self._done.set()

    def _on_request(self, request: Request) -> None:
        method = request.method
        if method == "cancel":
            task = self._tasks.get(request.params.get("id"))
            if task is not None:
                task.cancel()
            return
        if method == "event":
            self._event(request.params)
            return
        handler = self._methods.get(method)
        if handler is None:
            self.endpoint.respond_error(
                request.id, RPCError(ErrorCode.METHOD_NOT_FOUND, f"this plugin has no method {method!r}")
            )
            return
        task = asyncio.get_running_loop().create_task(self._run(request, handler))
        if request.id is not None:
            self._tasks[request.id] = task

    async def _run(self, request: Request, handler: Callable[[dict[str, Any]], Awaitable[Any]]) -> None:
        try:
            result = await handler(request.params)
        except RPCError as e:
            self._reply_error(request.id, e)
        except asyncio.CancelledError:
            self._reply_error(request.id, RPCError(ErrorCode.CANCELLED, f"{request.method} was cancelled"))
        except PermissionError as e:
            self._reply_error(request.id, RPCError(ErrorCode.PERMISSION_DENIED, str(e), {"type": "PermissionError"}))
        except Exception as e:
            _log.debug("%s failed", request.method, exc_info=True)
            self._reply_error(
                request.id, RPCError(ErrorCode.CALL_FAILED, f"{type(e).__name__}: {e}", {"type": type(e).__name__})
            )
        else:
            try:
                self.endpoint.respond(request.id, result)  # encode() converts what JSON cannot carry
            except ConnectionError:
                pass
        finally:
            self._tasks.pop(request.id, None)
        if request.method == "plugin.stop" and self._done is not None:
            self._done.set()

    def _reply_error(self, ident: Any, error: RPCError) -> None:
        try:
            self.endpoint.respond_error(ident, error)
        except ConnectionError:
            pass

    # -- lifecycle ----------------------------------------------------------------

    async def _handshake(self, p: dict[str, Any]) -> Any:
        version = p.get("protocol")
        if version != PROTOCOL_VERSION:
            raise RPCError(
                ErrorCode.INVALID_PARAMS, f"this SDK speaks protocol {PROTOCOL_VERSION}, the host asked for {version}"
            )
        return {"protocol": PROTOCOL_VERSION, "sdk_version": __version__, "plugin_name": self.name, "pid": os.getpid()}

    async def _init(self, p: dict[str, Any]) -> Any:
        if self._load_error is not None:
            err = self._load_error
            where = "".join(traceback.format_exception_only(type(err), err)).strip()
            raise RPCError(ErrorCode.CALL_FAILED, f"cannot load the plugin: {where}")
        if self._factory is None:
            raise RPCError(ErrorCode.CALL_FAILED, "no plugin factory")
        self.name = str(p.get("name") or self.name)
        folder = p.get("plugin_dir")
        if folder:
            self.folder = Path(folder)
        config = {"path": str(self.folder or ""), "manifest": p.get("manifest") or self.manifest}
        self.sdk = RemoteSDK(self.endpoint, self.handlers, self.name, self.folder)
        self.plugin = await _maybe_await(self._factory(self.name, config))
        if not callable(getattr(self.plugin, "start", None)):
            raise RPCError(ErrorCode.CALL_FAILED, f"the factory returned {type(self.plugin).__name__}, which has no start()")
        return {}

    async def _start(self, p: dict[str, Any]) -> Any:
        if self.plugin is None or self.sdk is None:
            raise RPCError(ErrorCode.UNAVAILABLE, "plugin.start before plugin.init")
        await _maybe_await(self.plugin.start(self.sdk))
        h = self.handlers
        return {"tools": sorted(h.tools), "stages": sorted(h.stages), "channels": sorted(h.channels)}

    async def _stop(self, p: dict[str, Any]) -> Any:
        await self._stop_plugin()
        return {}

    async def _stop_plugin(self) -> None:
        if self._stopped or self.plugin is None:
            return
        self._stopped = True
        try:
            await asyncio.wait_for(_maybe_await(self.plugin.stop()), 10.0)
        except Exception:
            _log.exception("plugin %s: stop() failed", self.name)

    async def _ping(self, p: dict[str, Any]) -> Any:
        return {"pong": True, "time": time.time()}

    # -- invocations --------------------------------------------------------------

    async def _tool(self, p: dict[str, Any]) -> Any:
        name = p.get("name")
        handler = self.handlers.tools.get(name) if isinstance(name, str) else None
        if handler is None:
            raise RPCError(ErrorCode.METHOD_NOT_FOUND, f"this plugin has no tool {name!r}")
        args = _dict(p.get("args"))
        is_async = self._async.get(handler)
        if is_async is None:
            is_async = self._async[handler] = _is_async(handler)
        call = p.get("call")
        token = TOOL_CALL.set(call if isinstance(call, str) else "")  # set_tool_blocks names this call
        TOOL_ORIGIN.set(origin_from(p.get("origin")))  # this request's own task: sdk.current_origin() reads it
        try:
            if is_async:
                return await handler(args)
            return await _maybe_await(await asyncio.to_thread(handler, args))  # to_thread copies the context
        finally:
            TOOL_CALL.reset(token)

    async def _stage(self, p: dict[str, Any]) -> Any:
        hid = p.get("handler")
        handler = self.handlers.stages.get(hid) if isinstance(hid, str) else None
        if handler is None:
            raise RPCError(ErrorCode.METHOD_NOT_FOUND, f"this plugin has no stage handler {hid!r}")
        try:
            stage = Stage(str(p.get("stage")))
        except ValueError:
            raise RPCError(ErrorCode.INVALID_PARAMS, f"unknown stage {p.get('stage')!r}") from None
        before = _dict(p.get("ctx"))
        raw_writable = p.get("writable")
        writable = [str(w) for w in raw_writable] if isinstance(raw_writable, list) else []
        ctx = context_from(before, writable)
        ctx.phase = stage
        view = StageView(ctx, stage)
        try:
            await _maybe_await(handler(view))
        finally:
            view._close()
        return {"changes": changes_between(before, ctx, writable)}

    async def _output(self, p: dict[str, Any]) -> Any:
        name = p.get("channel")
        handler = self.handlers.channels.get(name) if isinstance(name, str) else None
        if handler is None:
            raise RPCError(ErrorCode.METHOD_NOT_FOUND, f"this plugin has no output channel {name!r}")
        meta = _dict(p.get("meta"))
        return await _maybe_await(handler(str(p.get("payload", "")), meta, str(p.get("type") or "text")))

    async def _cleaner(self, p: dict[str, Any]) -> Any:
        key = (str(p.get("scope") or "text"), str(p.get("name")))
        cleaner = self.handlers.cleaners.get(key)
        if cleaner is None:
            raise RPCError(ErrorCode.METHOD_NOT_FOUND, f"this plugin has no {key[0]} cleaner {key[1]!r}")
        result = cleaner(str(p.get("text", "")))
        if not isinstance(result, str):
            raise RPCError(ErrorCode.CALL_FAILED, f"cleaner {key[1]!r} returned {type(result).__name__}, not str")
        return result

    def _event(self, p: dict[str, Any]) -> None:
        callback = self.handlers.subscriptions.get(str(p.get("subscription")))
        raw = p.get("event")
        if callback is None or not isinstance(raw, dict):
            return
        event = RemoteEvent(
            int(raw.get("id") or 0), str(raw.get("type") or ""), dict(raw.get("data") or {}), float(raw.get("ts") or 0)
        )

        async def deliver() -> None:
            try:
                await _maybe_await(callback(event))
            except Exception:
                _log.exception("plugin %s: event callback failed on %s", self.name, event.type)

        task = asyncio.get_running_loop().create_task(deliver())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def notify_log(self, level: str, message: str) -> None:
        """Send a log line through the protocol instead of stderr."""
        try:
            self.endpoint.notify("log", {"level": level, "message": message})
        except ConnectionError:
            pass


def _protocol_fds() -> tuple[int, int]:
    """Private duplicates of stdin/stdout for the protocol; fds 0/1 become /dev/null and stderr."""
    sys.stdout.flush()
    read_fd = os.dup(0)
    write_fd = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.stdin = open(os.devnull, encoding="utf-8")
    sys.stdout = sys.stderr
    return read_fd, write_fd


def _setup_logging(name: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    level = os.environ.get("HOMEAGENT_PLUGIN_LOG_LEVEL", "").upper()
    if level in ("DEBUG", "INFO", "WARNING", "ERROR"):
        root.setLevel(level)


def load_factory(folder: Path, entry: str) -> PluginFactory:
    """The ``create_plugin`` (or ``module:factory``) named by ``entry``, imported from ``folder``."""
    folder = folder.resolve()
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    if entry.endswith(".py"):
        path = (folder / entry).resolve()
        if not path.is_relative_to(folder) or not path.is_file():
            raise FileNotFoundError(f"entry {entry!r} is not a file in {folder}")
        spec = importlib.util.spec_from_file_location("homeagent_plugin_main", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        attr = "create_plugin"
    else:
        module_name, _, attr = entry.partition(":")
        module = importlib.import_module(module_name)
        attr = attr or "create_plugin"
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise AttributeError(f"{entry} defines no {attr}(name, config) factory")
    return factory


def _serve(
    factory: PluginFactory | None,
    *,
    name: str,
    folder: Path | None,
    manifest: Mapping[str, Any],
    load_error: BaseException | None = None,
    fds: tuple[int, int] | None = None,
) -> NoReturn:
    read_fd, write_fd = fds if fds is not None else _protocol_fds()
    runtime = PluginRuntime(
        Endpoint(read_fd, write_fd), factory, name=name, folder=folder, manifest=manifest, load_error=load_error
    )
    code = 0
    try:
        _run(runtime.serve())
    except KeyboardInterrupt:
        code = 130
    except BaseException:
        logging.getLogger("homeagent.sdk").exception("plugin runtime failed")
        code = 1
    sys.stderr.flush()
    os._exit(code)  # worker threads of the plugin must not keep a stopped plugin alive


def _run(main: Any) -> None:
    """asyncio.run, or uvloop's when HOMEAGENT_PLUGIN_UVLOOP=1 and uvloop is installed (optional, faster)."""
    if os.environ.get("HOMEAGENT_PLUGIN_UVLOOP") == "1":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            uvloop.run(main)
            return
    asyncio.run(main)


def run_plugin(factory: PluginFactory, *, name: str | None = None) -> NoReturn:
    """Serve ``factory``'s plugin on stdin/stdout (for a plugin that is its own executable entry)."""
    fds = _protocol_fds()
    folder = Path(os.environ.get("HOMEAGENT_PLUGIN_DIR") or Path(sys.argv[0]).resolve().parent)
    plugin_name = name or os.environ.get("HOMEAGENT_PLUGIN_NAME") or folder.name
    _setup_logging(plugin_name)
    _serve(factory, name=plugin_name, folder=folder, manifest={}, fds=fds)


def main(argv: list[str] | None = None) -> NoReturn:
    parser = argparse.ArgumentParser(
        prog="python -m homeagent.sdk.run", description="Run a Python HomeAgent plugin as a subprocess plugin."
    )
    parser.add_argument("dir", help="the plugin folder (with plugin.json)")
    args = parser.parse_args(argv)
    fds = _protocol_fds()
    folder = Path(args.dir).resolve()
    name = os.environ.get("HOMEAGENT_PLUGIN_NAME") or folder.name
    _setup_logging(name)
    manifest: dict[str, Any] = {}
    factory: PluginFactory | None = None
    error: BaseException | None = None
    try:
        manifest = json.loads((folder / "plugin.json").read_text(encoding="utf-8"))
        if not isinstance(manifest, dict) or not isinstance(manifest.get("entry"), str):
            raise ValueError(f"{folder / 'plugin.json'} has no 'entry'")
        factory = load_factory(folder, manifest["entry"])
    except Exception as e:  # reported to the host by plugin.init, with the reason
        logging.getLogger("homeagent.sdk").error("cannot load plugin %s: %s: %s", name, type(e).__name__, e)
        error = e
    _serve(factory, name=name, folder=folder, manifest=manifest, load_error=error, fds=fds)


if __name__ == "__main__":
    main()
