"""The QQ plugin: OneBot v11 chats in, the agent's replies out, and the tools a QQ bot needs.

Written only against the public SDK, as a third party would write it, and run
as a subprocess plugin (a crash or a hung OneBot link never touches the
daemon). How a message travels:

* The link (:mod:`qqbot.transport`) hands each event to :meth:`QQPlugin._event`,
  which decides at once: private chats from allowed users and group messages
  that address the bot (an @-mention or a keyword) become inputs; other group
  messages are dropped or, with ``remember_unaddressed``, only remembered.
  Inputs go into a **bounded** queue: a flood fills it and is then counted
  and dropped, so memory never grows with the flood.
* One feeder task moves the queue into the daemon (``inject_text``) as fast
  as the host accepts inputs (it rate-limits plugins; a "busy" answer waits
  and retries), remembering which chat each input id came from.
* The reply to an input comes back on the output channel ``qq`` with
  ``reply_to`` (and the host's ``user_id``/``group_id``): it is sent to the
  chat it came from, in parts of at most ``max_message_chars`` characters
  (cut at natural ends, never inside a code block or a character; one message
  per paragraph with ``reply_style`` paragraphs), paced per chat by a token
  bucket.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from homeagent.sdk import ConfigDef, InjectOptions, MediaBlock, OutputCap, PluginSDK, ServiceUnavailable
from homeagent.sdk.remote import RemoteError, RemoteSDK
from qqbot.cleaner import clean
from qqbot.images import IMAGES_PER_MESSAGE, ImageFetcher
from qqbot.message import Segment, header, segments, split_paragraphs, split_text, text_message, to_text
from qqbot.transport import ActionError, NotConnected, OneBotLink

BUSY = -32005
"""The host's "too many inputs" error code: wait and retry, the input is not lost."""

ROUTES_KEPT = 2000
OUTBOX_SIZE = 100
QUOTE_WAIT = 2.0
QUOTE_CHARS = 200
RECONNECT_WAIT = 30.0
"""How long a reply waits for a lost OneBot connection to come back before it is given up."""
SENT_KEPT = 2000
IMAGE_BYTES = 20 * 1024 * 1024
"""The most read of one image in a message (the media store's default limit)."""
SETTINGS_EVERY = 2.0
"""How often settings are read again (allow-lists and reply settings apply without a restart)."""
RESTART_FIELDS = ("mode", "ws_url", "access_token", "reverse_host", "reverse_port", "http_api_url", "http_secret",
                  "queue_size", "reconnect_max")
"""Settings that apply when the plugin starts (``plugin reload qq``): the connection, the queue."""


def _defs() -> list[ConfigDef]:
    """The plugin's settings. Who may talk to the agent and where the plugin connects or listens are
    owner-only: the model's settings tools cannot change them, so a message in a chat cannot open the
    bot to everyone or point it elsewhere."""
    cat = "QQ (OneBot v11)"
    return [
        ConfigDef("mode", "forward", "select", "Connection", "forward: the plugin connects to the OneBot "
                  "implementation's WebSocket server (ws_url); reverse: the implementation connects to the plugin "
                  "(reverse_host:reverse_port); http: actions over the HTTP API (http_api_url), events POSTed to "
                  "reverse_host:reverse_port.", cat, options=["forward", "reverse", "http"], owner_only=True),
        ConfigDef("ws_url", "ws://127.0.0.1:3001", "string", "WebSocket URL",
                  "Forward mode: the implementation's WebSocket server (NapCat's default port is 3001).", cat, owner_only=True),
        ConfigDef("access_token", "", "password", "Access token",
                  "The access token configured in the OneBot implementation (sent as a Bearer header; "
                  "required from reverse clients when set).", cat, owner_only=True),
        ConfigDef("reverse_host", "127.0.0.1", "string", "Reverse/HTTP: listen address",
                  "Reverse and http modes: where to listen. Anything but loopback needs an access token "
                  "(reverse) or a secret (http).", cat, owner_only=True),
        ConfigDef("reverse_port", 8781, "int", "Reverse/HTTP: port",
                  "Reverse and http modes: the port to listen on.", cat, min=1, max=65535, owner_only=True),
        ConfigDef("http_api_url", "http://127.0.0.1:3000", "string", "HTTP API URL",
                  "Http mode: the implementation's HTTP API (NapCat's default port is 3000).", cat, owner_only=True),
        ConfigDef("http_secret", "", "password", "HTTP POST secret",
                  "Http mode: the secret the implementation signs its event POSTs with (X-Signature).", cat, owner_only=True),
        ConfigDef("allowed_users", "", "string", "Allowed users",
                  "QQ numbers (comma-separated) whose private messages reach the agent; * for everyone. "
                  "Empty: private messages are ignored.", cat, owner_only=True),
        ConfigDef("allowed_groups", "", "string", "Allowed groups",
                  "Group numbers (comma-separated) the bot listens in; * for every group. Empty: groups are ignored.",
                  cat, owner_only=True),
        ConfigDef("group_keywords", "", "string", "Group keywords",
                  "Besides an @-mention, a group message that contains one of these (comma-separated, e.g. "
                  "'/ask, 小助手') is answered.", cat, owner_only=True),
        ConfigDef("images_to_model", "public", "select", "Images to the model",
                  "Images in QQ messages are fetched (at most 4 a message, each within core.memory.media.max_bytes) "
                  "and go to the model with the message, and into the media store. public: only from public "
                  "addresses (QQ's image servers); any: also from loopback and LAN addresses (an implementation "
                  "that serves images itself); off: the model gets the [图片 URL] marker only.", cat,
                  options=["public", "any", "off"], owner_only=True),
        ConfigDef("remember_unaddressed", False, "bool", "Remember unaddressed group messages",
                  "Group messages that do not address the bot get no reply; with this on they are still stored "
                  "in the document memory.", cat, owner_only=True),
        ConfigDef("max_message_chars", 1500, "int", "Longest message",
                  "Replies longer than this are sent as several messages (QQ cuts very long ones).", cat,
                  min=100, max=4500),
        ConfigDef("reply_style", "whole", "select", "Reply style",
                  "whole: a reply is one message, split only where it is longer than the longest message; "
                  "paragraphs: each paragraph of a reply (blank-line separated; a code block stays whole) is a "
                  "message of its own, as people write in chats.", cat, options=["whole", "paragraphs"]),
        ConfigDef("max_parts", 8, "int", "Most messages per reply",
                  "A reply is never sent as more messages than this; the rest is dropped with a note.", cat,
                  min=1, max=50),
        ConfigDef("rate_per_minute", 20, "int", "Messages per minute per chat",
                  "Sends to one group or user are paced to this rate (bursts of 5).", cat, min=1, max=600),
        ConfigDef("queue_size", 200, "int", "Inbound queue",
                  "Messages waiting to reach the agent; beyond this new ones are dropped and counted.", cat,
                  min=1, max=100000),
        ConfigDef("reconnect_max", 60, "int", "Longest reconnect delay (s)",
                  "Forward mode: reconnect attempts back off from 1 s up to this.", cat, min=1, max=3600),
    ]


def _choice(raw: Any, options: tuple[str, ...], unknown: str) -> str:
    """A select setting; an unknown value gives ``unknown`` (the safe choice), not an error at every message."""
    value = str(raw or "").strip().lower()
    return value if value in options else unknown


def _flag(raw: Any) -> bool:
    """A bool setting, also when it comes as text ("false" is false)."""
    if isinstance(raw, str):
        return raw.strip().lower() in ("1", "true", "yes", "on")
    return bool(raw)


def _ids(raw: Any) -> frozenset[str]:
    return frozenset(p.strip() for p in str(raw or "").replace("，", ",").split(",") if p.strip())


@dataclass
class QQSettings:
    mode: str = "forward"
    ws_url: str = "ws://127.0.0.1:3001"
    access_token: str = ""
    reverse_host: str = "127.0.0.1"
    reverse_port: int = 8781
    http_api_url: str = "http://127.0.0.1:3000"
    http_secret: str = ""
    allowed_users: frozenset[str] = frozenset()
    allowed_groups: frozenset[str] = frozenset()
    group_keywords: tuple[str, ...] = ()
    remember_unaddressed: bool = False
    images_to_model: str = "public"
    max_message_chars: int = 1500
    reply_style: str = "whole"
    max_parts: int = 8
    rate_per_minute: int = 20
    queue_size: int = 200
    reconnect_max: int = 60

    @classmethod
    def read(cls, get: Any) -> QQSettings:
        d = cls()

        def num(key: str, default: int) -> int:
            try:
                return int(get(key, default))
            except (TypeError, ValueError):
                return default

        return cls(
            mode=str(get("mode", d.mode) or d.mode),
            ws_url=str(get("ws_url", d.ws_url) or d.ws_url),
            access_token=str(get("access_token", "") or ""),
            reverse_host=str(get("reverse_host", d.reverse_host) or d.reverse_host),
            reverse_port=num("reverse_port", d.reverse_port),
            http_api_url=str(get("http_api_url", d.http_api_url) or d.http_api_url),
            http_secret=str(get("http_secret", "") or ""),
            allowed_users=_ids(get("allowed_users", "")),
            allowed_groups=_ids(get("allowed_groups", "")),
            group_keywords=tuple(k.lower() for k in _ids(get("group_keywords", ""))),
            remember_unaddressed=_flag(get("remember_unaddressed", False)),
            images_to_model=_choice(get("images_to_model", d.images_to_model), ("public", "any", "off"), "off"),
            max_message_chars=num("max_message_chars", d.max_message_chars),
            reply_style="paragraphs" if str(get("reply_style", d.reply_style)) == "paragraphs" else "whole",
            max_parts=num("max_parts", d.max_parts),
            rate_per_minute=num("rate_per_minute", d.rate_per_minute),
            queue_size=max(1, num("queue_size", d.queue_size)),
            reconnect_max=max(1, num("reconnect_max", d.reconnect_max)),
        )

    def user_allowed(self, user_id: str) -> bool:
        return "*" in self.allowed_users or user_id in self.allowed_users

    def group_allowed(self, group_id: str) -> bool:
        return "*" in self.allowed_groups or group_id in self.allowed_groups


@dataclass(frozen=True)
class Chat:
    """Where a message goes: a private chat or a group."""

    kind: str  # private | group
    id: str

    def __str__(self) -> str:
        return f"QQ {'group' if self.kind == 'group' else 'user'} {self.id}"


@dataclass
class Inbound:
    text: str
    chat: Chat
    user_id: str
    nickname: str
    message_id: str
    remember_only: bool = False
    reply_to: str = ""
    images: list[str] = field(default_factory=list)


@dataclass
class Counters:
    received: int = 0
    injected: int = 0
    dropped: int = 0
    ignored: int = 0
    not_allowed: int = 0
    remembered: int = 0
    inject_errors: int = 0
    images: int = 0
    image_errors: int = 0
    sent: int = 0
    send_errors: int = 0


class Pacer:
    """A token bucket per chat: ``rate_per_minute`` with bursts of ``burst``; waits, or refuses past ``max_wait``."""

    def __init__(self, rate_per_minute: int, burst: int = 5, max_wait: float = 30.0) -> None:
        self.rate = rate_per_minute / 60.0
        self.burst = float(burst)
        self.max_wait = max_wait
        self._buckets: dict[Chat, tuple[float, float]] = {}

    async def wait(self, chat: Chat) -> None:
        now = time.monotonic()
        tokens, at = self._buckets.get(chat, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate) - 1.0
        wait = -tokens / self.rate if tokens < 0 else 0.0
        if wait > self.max_wait:
            raise RuntimeError(f"{chat}: rate limit of {self.rate * 60:g} messages a minute; try again later")
        self._buckets[chat] = (tokens, now)
        if len(self._buckets) > 4096:  # forget chats whose bucket has refilled
            full = [c for c, (t, a) in self._buckets.items() if t + (now - a) * self.rate >= self.burst]
            for c in full:
                del self._buckets[c]
        if wait > 0:
            await asyncio.sleep(wait)


def _num(value: Any, what: str) -> int:
    text = str(value).strip()
    if not text.isdigit():
        raise ValueError(f"{what} must be a QQ number, got {value!r}")
    return int(text)


def _error(e: BaseException) -> dict[str, Any]:
    return {"isError": True, "content": str(e)}


META_HELP = (
    "Routing: {\"group_id\": \"123456\"} sends to a group, {\"user_id\": \"10001\"} to a private chat "
    "(only allowed groups/users: settings plugin.qq.allowed_groups / allowed_users); no meta while answering a QQ "
    "message: that message's chat. The reply to a QQ message goes back to its chat by itself; use this channel to "
    "write to a chat on your own or to send several messages (one call each). Types: text (long text is split into "
    "several messages at paragraph or sentence ends, never inside a code block, and paced per chat), image (payload: an http(s) URL or an absolute file path the "
    "OneBot implementation can read), file (payload: an absolute file path; uses the upload_*_file extension of "
    "NapCat/Lagrange/go-cqhttp)."
)


class QQPlugin:
    def __init__(self, name: str) -> None:
        self.name = name
        self.sdk: PluginSDK | None = None
        self.cfg = QQSettings()
        self.log = logging.getLogger(f"homeagent.plugin.{name}")
        self.link = OneBotLink(self._event, self._status, log=self.log)
        self.counters = Counters()
        self.self_id = ""
        self.kicked_from: list[str] = []
        self.state = ("starting", "")
        self._queue: asyncio.Queue[Inbound] = asyncio.Queue(1)
        self._outbox: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue(OUTBOX_SIZE)
        self._routes: collections.OrderedDict[str, tuple[Chat, str]] = collections.OrderedDict()
        self._sent: collections.OrderedDict[str, Chat] = collections.OrderedDict()
        self._pacer = Pacer(20)
        self._tasks: list[asyncio.Task[None]] = []
        self._images: ImageFetcher | None = None

    # ---------------------------------------------------------------- lifecycle

    async def start(self, sdk: PluginSDK) -> None:
        self.sdk = sdk
        for d in _defs():
            sdk.settings.register_def(d)
        self.cfg = QQSettings.read(sdk.settings.get)
        self._queue = asyncio.Queue(self.cfg.queue_size)
        self._pacer = Pacer(self.cfg.rate_per_minute)
        # the daemon checks each image against core.memory.media.max_bytes (a refusal sends the text alone);
        # this only bounds what is read before that
        self._images = ImageFetcher(allow_private=self.cfg.images_to_model == "any", max_bytes=IMAGE_BYTES)
        sdk.register_text_cleaner("qq", clean)
        sdk.register_output_channel(
            "qq",
            OutputCap.TEXT | OutputCap.IMAGE | OutputCap.FILE,
            "QQ chats through OneBot v11: send text, images or files to a QQ group or user.",
            self._deliver,
            meta_help=META_HELP,
            types=["text", "image", "file"],
        )
        if isinstance(sdk, RemoteSDK):
            sdk.register_input_channel("qq", "QQ private chats and group messages that address the bot")
        self._register_tools(sdk)
        cfg = self.cfg
        if cfg.mode == "reverse":
            link = self.link.run_reverse(cfg.reverse_host, cfg.reverse_port, cfg.access_token)
        elif cfg.mode == "http":
            link = self.link.run_http(
                cfg.http_api_url, cfg.access_token, cfg.reverse_host, cfg.reverse_port, cfg.http_secret
            )
        else:
            link = self.link.run_forward(cfg.ws_url, cfg.access_token, backoff_max=float(cfg.reconnect_max))
        self._tasks = [asyncio.create_task(link), asyncio.create_task(self._feed()), asyncio.create_task(self._post()),
                       asyncio.create_task(self._follow_settings())]
        if not cfg.allowed_users and not cfg.allowed_groups:
            self.log.warning("plugin.qq.allowed_users and allowed_groups are empty: every QQ message is ignored")

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        if self._images is not None:
            await self._images.close()

    async def _follow_settings(self) -> None:
        """Apply changed settings within ``SETTINGS_EVERY`` seconds, without a restart.

        Who may talk (allow-lists, keywords) and how replies are sent take
        effect at once; where the plugin connects and the queue size need
        ``plugin reload qq``, and the log says so.
        """
        sdk = self.sdk
        assert sdk is not None
        told: QQSettings | None = None
        while True:
            await asyncio.sleep(SETTINGS_EVERY)
            try:
                stored = await asyncio.to_thread(sdk.settings.list)  # one call: the values set, by key
                new = QQSettings.read(stored.get)
            except Exception as e:  # the daemon is busy or going away: try again next time
                self.log.debug("reading settings failed: %s", e)
                continue
            old = self.cfg
            kept = {f: getattr(old, f) for f in RESTART_FIELDS}
            live = replace(new, **kept)
            if live != old:
                if live.rate_per_minute != old.rate_per_minute:
                    self._pacer = Pacer(live.rate_per_minute)
                self.cfg = live
                self.log.info("settings changed; applied")
            pending = replace(old, **{f: getattr(new, f) for f in RESTART_FIELDS})
            if pending != old and pending != told:
                told = pending
                self.log.warning("connection settings changed: run `homeagent plugin reload qq` to apply them")

    def _status(self, state: str, detail: str) -> None:
        if (state, detail) == self.state:
            return
        self.state = (state, detail)
        log = self.log.warning if state == "error" else self.log.debug if state == "connecting" else self.log.info
        log("OneBot %s: %s", state, detail)
        if isinstance(self.sdk, RemoteSDK):
            with contextlib.suppress(Exception):
                self.sdk.set_status(state, detail)

    # ---------------------------------------------------------------- inbound

    def _event(self, ev: dict[str, Any]) -> None:
        if ev.get("self_id") is not None:
            self.self_id = str(ev["self_id"])
        if ev.get("post_type") == "notice" and ev.get("notice_type") == "group_decrease" and ev.get("sub_type") == "kick_me":
            group = str(ev.get("group_id") or "")
            self.kicked_from = [*self.kicked_from[-19:], group]
            self.log.warning("the bot was removed from QQ group %s; sends to it will fail", group)
            return
        if ev.get("post_type") != "message":
            return  # meta events (heartbeat, lifecycle), other notices, requests, the bot's own sent messages
        self.counters.received += 1
        user_id = str(ev.get("user_id") or "")
        kind = ev.get("message_type")
        if kind == "group":
            chat = Chat("group", str(ev.get("group_id") or ""))
            allowed = bool(chat.id) and self.cfg.group_allowed(chat.id)
        elif kind == "private":
            chat = Chat("private", user_id)
            allowed = bool(user_id) and self.cfg.user_allowed(user_id)
        else:
            self.counters.ignored += 1
            return
        if not allowed or user_id == self.self_id:
            self.counters.not_allowed += 1
            return
        parsed = to_text(segments(ev.get("message")), self.self_id)
        if not parsed.text:
            self.counters.ignored += 1
            return
        raw_sender = ev.get("sender")
        sender: dict[str, Any] = raw_sender if isinstance(raw_sender, dict) else {}
        nickname = str(sender.get("card") or sender.get("nickname") or "").strip()
        addressed = chat.kind == "private" or parsed.mentioned or self._keyword(parsed.text)
        if not addressed and not self.cfg.remember_unaddressed:
            self.counters.ignored += 1
            return
        text = f"{header(user_id, nickname, chat.id if chat.kind == 'group' else '')} {parsed.text}"
        item = Inbound(text, chat, user_id, nickname, str(ev.get("message_id") or ""), remember_only=not addressed,
                       reply_to=parsed.reply_to,
                       images=[u for u in parsed.images if u.startswith(("http://", "https://"))][:IMAGES_PER_MESSAGE])
        try:
            self._queue.put_nowait(item)
        except asyncio.QueueFull:
            self.counters.dropped += 1

    def _keyword(self, text: str) -> bool:
        lowered = text.lower()
        return any(k in lowered for k in self.cfg.group_keywords)

    async def _feed(self) -> None:
        sdk = self.sdk
        assert sdk is not None
        while True:
            item = await self._queue.get()
            if item.remember_only:
                await self._remember(sdk, item)
                continue
            if item.reply_to:
                item.text = await self._with_quote(item.text, item.reply_to)
            options = InjectOptions(
                user_id=item.user_id,
                user_name=item.nickname,
                group_id=item.chat.id if item.chat.kind == "group" else "",
                meta={"qq": {"chat": item.chat.kind, "chat_id": item.chat.id, "nickname": item.nickname,
                             "message_id": item.message_id}},
            )
            media = await self._fetch_images(item.images)
            delay = 0.05
            while True:
                try:
                    if media:
                        ident = sdk.inject_input_media("qq", "qq", item.text, media, options=options)
                    else:
                        ident = sdk.inject_text("qq", "qq", item.text, options=options)
                except RemoteError as e:
                    if e.code == BUSY:
                        await asyncio.sleep(delay)
                        delay = min(delay * 2, 1.0)
                        continue
                    if media:  # the media were refused (too big, media store off): the text still goes, markers in it
                        self.log.warning("the daemon refused the images of a QQ message (%s); sending its text", e)
                        self.counters.image_errors += len(media)
                        media = []
                        continue
                    self.counters.inject_errors += 1
                    self.log.error("the daemon refused a QQ message: %s", e)
                except Exception as e:
                    self.counters.inject_errors += 1
                    self.log.error("the daemon refused a QQ message: %s", e)
                else:
                    self.counters.injected += 1
                    self._routes[ident] = (item.chat, item.message_id)
                    while len(self._routes) > ROUTES_KEPT:
                        self._routes.popitem(last=False)
                break

    async def _fetch_images(self, urls: list[str]) -> list[MediaBlock]:
        """The message's images as media for the model (``images_to_model``); the ones that fail are left out."""
        fetcher = self._images
        if not urls or fetcher is None or self.cfg.images_to_model == "off":
            return []
        fetcher.allow_private = self.cfg.images_to_model == "any"
        results = await asyncio.gather(*(fetcher.fetch(u) for u in urls), return_exceptions=True)
        blocks: list[MediaBlock] = []
        for url, result in zip(urls, results, strict=True):
            if isinstance(result, MediaBlock):
                blocks.append(result)
                self.counters.images += 1
            elif isinstance(result, Exception):
                self.counters.image_errors += 1
                self.log.warning("QQ image %s not fetched: %s", url[:120], result)
            else:
                raise result
        return blocks

    async def _with_quote(self, text: str, message_id: str) -> str:
        """``[回复 #ID]`` with who said what in the quoted message, so the model sees what is being answered.

        Best effort: the marker stays as it is if the implementation does not
        know the message or takes longer than a moment (the input is waiting).
        """
        try:
            data = await self.link.call("get_msg", {"message_id": _num(message_id, "message_id")}, timeout=QUOTE_WAIT)
        except (ActionError, NotConnected, ValueError):
            return text
        if not isinstance(data, dict):
            return text
        raw_sender = data.get("sender")
        sender: dict[str, Any] = raw_sender if isinstance(raw_sender, dict) else {}
        who = str(sender.get("card") or sender.get("nickname") or sender.get("user_id") or "?")
        quoted = to_text(segments(data.get("message")), self.self_id).text
        quoted = " ".join(quoted.replace("]", "）").replace("[", "（").split())
        if len(quoted) > QUOTE_CHARS:
            quoted = quoted[:QUOTE_CHARS] + "…"
        return text.replace(f"[回复 #{message_id}]", f"[回复 #{message_id} {who}: {quoted}]", 1)

    async def _remember(self, sdk: PluginSDK, item: Inbound) -> None:
        try:
            await sdk.doc_memory.insert(item.text)
            self.counters.remembered += 1
        except (ServiceUnavailable, PermissionError, RemoteError, ConnectionError, TimeoutError) as e:
            self.counters.inject_errors += 1
            self.log.warning("could not remember a group message: %s", e)

    # ---------------------------------------------------------------- outbound

    def _route(self, meta: Mapping[str, Any]) -> tuple[Chat, str, bool]:
        """(chat, message id to quote, is a reply) for a send with ``meta``."""
        reply_to = str(meta.get("reply_to") or "")
        if reply_to in self._routes:
            chat, quoted = self._routes[reply_to]
            return chat, quoted, True
        # Not an input this plugin delivered (or one from before a restart): the allow-lists decide,
        # so a made-up reply_to cannot open a chat the user did not allow.
        if meta.get("group_id"):
            chat = Chat("group", str(_num(meta["group_id"], "group_id")))
            if not self.cfg.group_allowed(chat.id):
                raise PermissionError(f"{chat} is not in plugin.qq.allowed_groups")
            return chat, "", False
        if meta.get("user_id"):
            chat = Chat("private", str(_num(meta["user_id"], "user_id")))
            if not self.cfg.user_allowed(chat.id):
                raise PermissionError(f"{chat} is not in plugin.qq.allowed_users")
            return chat, "", False
        raise ValueError('meta needs "group_id" or "user_id" (see output_send__qq_help)')

    async def _send(self, chat: Chat, message: list[Segment]) -> str:
        await self._pacer.wait(chat)
        if chat.kind == "group":
            data = await self.link.call("send_group_msg", {"group_id": int(chat.id), "message": message})
        else:
            data = await self.link.call("send_private_msg", {"user_id": int(chat.id), "message": message})
        mid = str(data.get("message_id", "")) if isinstance(data, dict) else ""
        if mid:
            self._sent[mid] = chat
            while len(self._sent) > SENT_KEPT:
                self._sent.popitem(last=False)
        self.counters.sent += 1
        return mid

    async def _deliver(self, payload: str, meta: dict[str, Any], type_: str) -> Any:
        """The channel handler. Replies to inputs are queued and sent by :meth:`_post`.

        The agent hands a reply over before it starts its next turn, so
        waiting here for a chat's pacing (or a reconnect) would hold up every
        channel; a send the model asked for waits, so it learns the outcome.
        """
        if meta.get("reply_to") and type_ == "text":
            chat, _, _ = self._route(meta)
            try:
                self._outbox.put_nowait((payload, dict(meta)))
            except asyncio.QueueFull:
                self.counters.send_errors += 1
                raise RuntimeError(f"{OUTBOX_SIZE} QQ replies are already waiting to be sent; this one was dropped") from None
            return {"status": "queued", "to": str(chat)}
        return await self._send_now(payload, meta, type_)

    async def _post(self) -> None:
        while True:
            payload, meta = await self._outbox.get()
            try:
                await self.link.wait_connected(RECONNECT_WAIT)
                await self._send_now(payload, meta, "text")
            except Exception as e:
                self.log.error("a QQ reply could not be sent: %s", e)

    async def _send_now(self, payload: str, meta: dict[str, Any], type_: str) -> Any:
        chat, quoted, is_reply = self._route(meta)
        try:
            if type_ == "text":
                split = split_paragraphs if self.cfg.reply_style == "paragraphs" else split_text
                parts = split(payload, self.cfg.max_message_chars, self.cfg.max_parts)
                if not parts:
                    raise ValueError("nothing to send: the text is empty")
                ids = []
                for i, part in enumerate(parts):
                    quote = quoted if i == 0 and is_reply and chat.kind == "group" else ""
                    ids.append(await self._send(chat, text_message(part, quote)))
                return {"status": "sent", "to": str(chat), "parts": len(ids), "message_ids": ids}
            if type_ == "image":
                mid = await self._send(chat, [{"type": "image", "data": {"file": _file_ref(payload, "image")}}])
                return {"status": "sent", "to": str(chat), "message_ids": [mid]}
            if type_ == "file":
                path = _local_file(payload)
                action, target = (
                    ("upload_group_file", {"group_id": int(chat.id)})
                    if chat.kind == "group"
                    else ("upload_private_file", {"user_id": int(chat.id)})
                )
                await self._pacer.wait(chat)
                await self.link.call(action, {**target, "file": str(path), "name": path.name}, timeout=120.0)
                self.counters.sent += 1
                return {"status": "sent", "to": str(chat), "file": path.name}
            raise ValueError(f"type {type_!r} is not one of text, image, file")
        except (ActionError, NotConnected, RuntimeError, ValueError, PermissionError):
            self.counters.send_errors += 1
            raise

    # ---------------------------------------------------------------- tools

    def _register_tools(self, sdk: PluginSDK) -> None:
        msg_id = {"type": ["integer", "string"], "description": "the QQ message id"}
        qq = {"type": ["integer", "string"]}
        sdk.register_tool(
            "qq_get_message", self._get_message, no_memory=True,
            description="Read a QQ message by id (e.g. the one a [回复 #ID] marker quotes): sender, time and text.",
            parameters={"type": "object", "properties": {"message_id": msg_id}, "required": ["message_id"]},
        )
        sdk.register_tool(
            "qq_recall_message", self._recall,
            description="Recall (delete) a QQ message this bot sent recently, by its id (as returned when sending).",
            parameters={"type": "object", "properties": {"message_id": msg_id}, "required": ["message_id"]},
        )
        sdk.register_tool(
            "qq_group_member_info", self._member_info, no_memory=True,
            description="A QQ group member's card, nickname, role, title, level and join time.",
            parameters={"type": "object", "properties": {"group_id": qq, "user_id": qq},
                        "required": ["group_id", "user_id"]},
        )
        sdk.register_tool(
            "qq_send_group", lambda a: self._send_tool({"group_id": a["group_id"]}, a["text"]),
            description="Send a text message to an allowed QQ group.",
            parameters={"type": "object", "properties": {"group_id": qq, "text": {"type": "string"}},
                        "required": ["group_id", "text"]},
        )
        sdk.register_tool(
            "qq_send_private", lambda a: self._send_tool({"user_id": a["user_id"]}, a["text"]),
            description="Send a text message to an allowed QQ user in a private chat.",
            parameters={"type": "object", "properties": {"user_id": qq, "text": {"type": "string"}},
                        "required": ["user_id", "text"]},
        )
        sdk.register_tool(
            "qq_status", self._status_tool, no_memory=True,
            description="The QQ connection: mode, state, bot account, counters (received, dropped, sent) and the last error.",
        )

    async def _send_tool(self, meta: dict[str, Any], text: str) -> Any:
        try:
            return await self._deliver(text, meta, "text")
        except (ActionError, NotConnected, RuntimeError, ValueError, PermissionError) as e:
            return _error(e)

    async def _get_message(self, args: dict[str, Any]) -> Any:
        try:
            data = await self.link.call("get_msg", {"message_id": _num(args["message_id"], "message_id")})
        except (ActionError, NotConnected, ValueError) as e:
            return _error(e)
        data = data if isinstance(data, dict) else {}
        raw_sender = data.get("sender")
        sender: dict[str, Any] = raw_sender if isinstance(raw_sender, dict) else {}
        return {
            "message_id": data.get("message_id"),
            "time": data.get("time"),
            "message_type": data.get("message_type"),
            "group_id": data.get("group_id"),
            "sender": {k: sender.get(k) for k in ("user_id", "nickname", "card") if sender.get(k) is not None},
            "text": to_text(segments(data.get("message")), self.self_id).text,
        }

    async def _recall(self, args: dict[str, Any]) -> Any:
        mid = str(args["message_id"]).strip()
        if mid not in self._sent:
            return _error(ValueError(
                f"message {mid} was not sent by this bot since the plugin started; only its own messages can be recalled"
            ))
        try:
            await self.link.call("delete_msg", {"message_id": _num(mid, "message_id")})
        except (ActionError, NotConnected) as e:
            return _error(e)
        self._sent.pop(mid, None)
        return {"status": "recalled", "message_id": mid}

    async def _member_info(self, args: dict[str, Any]) -> Any:
        try:
            data = await self.link.call(
                "get_group_member_info",
                {"group_id": _num(args["group_id"], "group_id"), "user_id": _num(args["user_id"], "user_id")},
            )
        except (ActionError, NotConnected, ValueError) as e:
            return _error(e)
        keep = ("group_id", "user_id", "nickname", "card", "role", "title", "level", "join_time", "last_sent_time")
        return {k: data.get(k) for k in keep if isinstance(data, dict) and k in data}

    async def _status_tool(self, args: dict[str, Any]) -> Any:
        return {
            "mode": self.cfg.mode,
            "where": self.link.where,
            "state": self.state[0],
            "detail": self.state[1],
            "connected": self.link.connected,
            "self_id": self.self_id,
            "kicked_from": self.kicked_from,
            "queue": self._queue.qsize(),
            "queue_size": self.cfg.queue_size,
            **vars(self.counters),
            "link": self.link.stats.to_dict(),
        }


def _file_ref(payload: str, what: str) -> str:
    """An http(s) URL as it is, or an absolute local path as a file:// URI (it must exist)."""
    payload = payload.strip()
    if payload.startswith(("http://", "https://", "base64://", "file://")):
        return payload
    path = Path(payload).expanduser()
    if not path.is_absolute():
        raise ValueError(f"the {what} must be an http(s) URL or an absolute path, got {payload!r}")
    if not path.is_file():
        raise ValueError(f"no such {what}: {path}")
    return path.as_uri()


def _local_file(payload: str) -> Path:
    path = Path(payload.strip()).expanduser()
    if not path.is_absolute() or not path.is_file():
        raise ValueError(f"the file must be an absolute path to an existing file, got {payload!r}")
    return path


def create_plugin(name: str, config: Mapping[str, Any]) -> QQPlugin:
    return QQPlugin(name)
