"""Wire format of protocol v1: NDJSON JSON-RPC frames, shared by the host and the Python SDK.

Why it is written this way:

* Pure standard library and no import of the daemon: the plugin-side runtime
  (``homeagent.sdk.remote``) uses the same codec, and a child process should
  not pay for importing the host.
* A frame is one line. :class:`FrameBuffer` splits a byte stream into lines
  without ever holding more than ``max_frame`` bytes of one frame: a longer
  line is skipped to its end and reported as :class:`Oversized` (with its
  first bytes, so the receiver can still answer the request id if it is near
  the start). Partial frames are kept as a list of chunks and joined once, so
  a 16 MB frame arriving in 64 KB pieces costs one copy, not 256.
* :func:`parse` never raises anything but :class:`ProtocolError`, whatever
  the bytes: the host's reader survives garbage, and a hypothesis test holds
  it to that.
* :func:`encode` turns values JSON cannot carry (dataclasses, sets, bytes,
  NaN) into JSON rather than failing, so a plugin that returns a ``set``
  still gets an answer across.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from homeagent.text import TooDeep, loads

__all__ = [
    "MAX_FRAME",
    "PROTOCOL_VERSION",
    "ErrorCode",
    "FrameBuffer",
    "Oversized",
    "ProtocolError",
    "RPCError",
    "Request",
    "Response",
    "encode",
    "encode_error",
    "encode_notification",
    "encode_request",
    "encode_response",
    "parse",
    "to_json",
]

PROTOCOL_VERSION = 1
MAX_FRAME = 16 * 1024 * 1024
"""Default largest frame (bytes, without the newline) either side accepts."""

_HEAD = 256  # bytes of an oversized frame kept to find its id and method
_ID_RE = re.compile(rb'"id"\s*:\s*(\d{1,15}|"[^"\\]{1,128}")')
_METHOD_RE = re.compile(rb'"method"\s*:\s*"([^"\\]{1,128})"')
_MAX_ID = 2**53 - 1

Id = int | str


class ErrorCode(enum.IntEnum):
    """``error.code`` values; the -327xx/-326xx ones are JSON-RPC 2.0's own."""

    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    CALL_FAILED = -32000
    CAPABILITY_DENIED = -32001
    TIMEOUT = -32002
    UNAVAILABLE = -32003
    SERVICE_UNAVAILABLE = -32004
    BUSY = -32005
    FRAME_TOO_LARGE = -32006
    PERMISSION_DENIED = -32007
    CANCELLED = -32008


class RPCError(Exception):
    """An ``error`` object: raised by method handlers, received as a call's failure."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = int(code)
        self.message = message
        self.data = data

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            out["data"] = self.data
        return out

    def __repr__(self) -> str:
        return f"RPCError({self.code}, {self.message!r})"


class ProtocolError(ValueError):
    """A frame that is not a usable message; ``id`` is set when it could still be answered."""

    def __init__(self, code: int, message: str, id: Id | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.id = id


@dataclass(slots=True)
class Request:
    """A request (``id`` set) or a notification (``id`` None)."""

    method: str
    params: dict[str, Any]
    id: Id | None = None


@dataclass(slots=True)
class Response:
    """The answer to a request: ``error`` None means success."""

    id: Id | None
    result: Any = None
    error: RPCError | None = None


@dataclass(slots=True)
class Oversized:
    """A frame longer than the limit, skipped; ``head`` is its first bytes."""

    size: int
    head: bytes

    def guess(self) -> tuple[Id | None, str | None]:
        """The frame's id and method if they appear near its start (best effort)."""
        ident: Id | None = None
        m = _ID_RE.search(self.head)
        if m is not None:
            raw = m.group(1)
            ident = raw[1:-1].decode("utf-8", "replace") if raw.startswith(b'"') else int(raw)
        mm = _METHOD_RE.search(self.head)
        return ident, mm.group(1).decode("utf-8", "replace") if mm else None


# ---------------------------------------------------------------- encoding


def to_json(value: Any, _depth: int = 0) -> Any:
    """``value`` as plain JSON data: dataclasses → objects, sets → arrays, bytes → text, NaN → string."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, enum.Enum):
        return to_json(value.value, _depth + 1)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if _depth > 64:
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): to_json(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v, _depth + 1) for v in value]
    if isinstance(value, set | frozenset):
        items = [to_json(v, _depth + 1) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="replace")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name), _depth + 1) for f in dataclasses.fields(value)}
    obj = getattr(value, "_obj", None)  # a stage host's read-only view of a dataclass
    if obj is not None and dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_json(obj, _depth + 1)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return to_json(dump(mode="json"), _depth + 1)
        except Exception:
            pass
    return str(value)


def encode(message: Mapping[str, Any]) -> bytes:
    """One frame: compact JSON, UTF-8, newline-terminated."""
    try:
        text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        text = json.dumps(to_json(message), ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8", errors="replace") + b"\n"


def encode_request(ident: Id, method: str, params: Mapping[str, Any] | None = None) -> bytes:
    return encode({"id": ident, "method": method, "params": params if params is not None else {}})


def encode_notification(method: str, params: Mapping[str, Any] | None = None) -> bytes:
    return encode({"method": method, "params": params if params is not None else {}})


def encode_response(ident: Id | None, result: Any) -> bytes:
    return encode({"id": ident, "result": result})


def encode_error(ident: Id | None, error: RPCError) -> bytes:
    return encode({"id": ident, "error": error.to_dict()})


# ---------------------------------------------------------------- decoding


def _valid_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return 0 <= value <= _MAX_ID
    return isinstance(value, str) and 0 < len(value) <= 128


def parse(line: bytes | bytearray | str) -> Request | Response:
    """Decode one frame; anything unusable is a :class:`ProtocolError` with the JSON-RPC code."""
    try:
        text = line.decode("utf-8") if isinstance(line, bytes | bytearray) else line
        data = loads(text)  # lone surrogates become U+FFFD once, here, for every frame
    except TooDeep:
        raise ProtocolError(ErrorCode.PARSE_ERROR, "frame is nested too deeply") from None
    except UnicodeDecodeError:
        raise ProtocolError(ErrorCode.PARSE_ERROR, "frame is not UTF-8") from None
    except RecursionError:
        raise ProtocolError(ErrorCode.PARSE_ERROR, "frame is nested too deeply") from None
    except ValueError as e:
        msg = getattr(e, "msg", None) or str(e)
        raise ProtocolError(ErrorCode.PARSE_ERROR, f"frame is not JSON ({msg})") from None
    if not isinstance(data, dict):
        raise ProtocolError(ErrorCode.INVALID_REQUEST, f"frame must be a JSON object, got {_kind(data)}")
    raw_id = data.get("id")
    ident: Id | None = raw_id if _valid_id(raw_id) else None
    if raw_id is not None and ident is None:
        raise ProtocolError(
            ErrorCode.INVALID_REQUEST, f"'id' must be a non-negative integer or a short string, got {_kind(raw_id)}"
        )
    if "method" in data:
        method = data["method"]
        if not isinstance(method, str) or not method or len(method) > 128:
            raise ProtocolError(ErrorCode.INVALID_REQUEST, "'method' must be a non-empty string", ident or None)
        params = data.get("params")
        if params is None:
            params = {}
        elif not isinstance(params, dict):
            raise ProtocolError(
                ErrorCode.INVALID_PARAMS, f"'params' of {method} must be a JSON object, got {_kind(params)}", ident or None
            )
        return Request(method, params, ident or None)
    if "result" in data or "error" in data:
        err = data.get("error")
        if err is None:
            return Response(ident, data.get("result"))
        if not isinstance(err, dict) or not isinstance(err.get("message", ""), str):
            raise ProtocolError(ErrorCode.INVALID_REQUEST, "'error' must be an object with code and message", None)
        code = err.get("code")
        if isinstance(code, bool) or not isinstance(code, int):
            code = ErrorCode.INTERNAL_ERROR
        return Response(ident, None, RPCError(code, str(err.get("message") or "error"), err.get("data")))
    raise ProtocolError(ErrorCode.INVALID_REQUEST, "frame has neither 'method' nor 'result'/'error'", ident or None)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "array", dict: "object"}.get(
        type(value), type(value).__name__
    )


class FrameBuffer:
    """Splits a byte stream into frames (lines), holding at most ``max_frame`` bytes of one frame."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._parts: list[bytes] = []
        self._size = 0
        self._skipping: Oversized | None = None

    @property
    def pending(self) -> int:
        """Bytes held of an incomplete frame."""
        return self._size

    def feed(self, data: bytes) -> list[bytes | Oversized]:
        """The frames completed by ``data`` (blank lines dropped), in order."""
        out: list[bytes | Oversized] = []
        start = 0
        n = len(data)
        while start < n:
            nl = data.find(b"\n", start)
            if nl < 0:
                self._hold(data, start, n)
                break
            if self._skipping is not None:
                self._skipping.size += nl - start
                out.append(self._skipping)
                self._skipping = None
            elif self._parts:
                self._parts.append(data[start:nl])
                line = b"".join(self._parts)
                self._parts, self._size = [], 0
                self._emit(line, out)
            else:
                self._emit(data[start:nl], out)
            start = nl + 1
        return out

    def _hold(self, data: bytes, start: int, end: int) -> None:
        if self._skipping is not None:
            self._skipping.size += end - start
            return
        piece = data[start:end]
        if self._size + len(piece) > self.max_frame:
            head = (b"".join(self._parts) + piece)[:_HEAD] if self._size < _HEAD else b"".join(self._parts)[:_HEAD]
            self._skipping = Oversized(self._size + len(piece), head)
            self._parts, self._size = [], 0
            return
        self._parts.append(piece)
        self._size += len(piece)

    def _emit(self, line: bytes, out: list[bytes | Oversized]) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if len(line) > self.max_frame:
            out.append(Oversized(len(line), line[:_HEAD]))
        elif line and not line.isspace():
            out.append(line)
