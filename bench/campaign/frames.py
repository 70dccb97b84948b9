"""Seeded generators of malformed frames: one place decides what "malformed" means for both fuzzed surfaces.

Each generated frame says what an honest server owes it: an error answer
(`error`), a turn's response (`turn`) or an RPC result (`ok`). A frame is raw
bytes ending in a newline, so one bad frame never merges with the next one
(a merged pair would be one frame, and the count of answers owed would lie).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass

SOCKET_MAX_FRAME = 4 * 1024 * 1024
SURROGATES = ("\ud800", "\udfff", "a\udc80b", "\ud83d")


@dataclass
class Frame:
    data: bytes
    owed: str  # "error", "turn" or "ok"
    kind: str


def _json(value: object) -> bytes:
    # ensure_ascii keeps lone surrogates as \ud800 escapes: valid JSON, not valid text
    return json.dumps(value).encode() + b"\n"


def deep(depth: int, rng: random.Random) -> bytes:
    opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
    return (opener * depth + "1" + closer * depth).encode() + b"\n"


def binary(rng: random.Random, n: int) -> bytes:
    # 0xff first: never valid UTF-8, and never a blank line (which a server may rightly ignore)
    return b"\xff" + bytes(b for b in rng.randbytes(n) if b != 0x0A) + b"\n"


def _huge_number(ident: int, digits: int) -> bytes:
    return f'{{"type":"rpc","id":{ident},"method":"config.get","params":{{"key":{"9" * digits}}}}}\n'.encode()


def _socket_kinds(rng: random.Random, ident: Callable[[], int]) -> list[tuple[int, Callable[[], Frame]]]:
    wrong: list[object] = [None, 1, 1.5, True, [], {}, "x", -1, 2**70, [1, [2]]]
    methods = ["nope", "config.nope", "", "status.x", "SHUTDOWN", "__init__", "config..get", "x" * 300]

    def rpc(method: object, params: object, owed: str = "error") -> bytes:
        return _json({"type": "rpc", "id": ident(), "method": method, "params": params})

    return [
        (12, lambda: Frame(rng.choice([b"{", b"}", b"{]", b'{"type":', b"nul", b"[1,", b'{"a":1,}', b"'x'"]) + b"\n",
                           "error", "bad json")),
        (8, lambda: Frame(_json({"type": "chat", "text": "hello"})[: rng.randint(1, 20)] + b"\n", "error", "partial line")),
        (10, lambda: Frame(binary(rng, rng.randint(1, 200)), "error", "binary")),
        (10, lambda: Frame(_json(rng.choice(wrong)), "error", "not an object")),
        (12, lambda: Frame(_json({"type": rng.choice([*wrong, "nope", "CHAT", "rpc_result", "hello", ""])}), "error",
                           "wrong type")),
        (10, lambda: Frame(_json({"type": "chat", "text": rng.choice([None, 1, 1.5, True, [], {}, [1], {"t": 1}])}), "error",
                           "chat text not a string")),
        (6, lambda: Frame(_json({"type": "rpc", "id": rng.choice(wrong), "method": "status"}), "ok", "odd rpc id")),
        (12, lambda: Frame(rpc(rng.choice(methods), {}), "error", "unknown method")),
        (8, lambda: Frame(rpc(rng.choice(wrong), {}), "error", "method not a string")),
        (10, lambda: Frame(rpc("config.get", rng.choice([*wrong, {"key": 1}, {"key": rng.choice(SURROGATES)}])),
                           "error", "bad params")),
        (6, lambda: Frame(rpc("config.set", {"key": "no.such.key" + rng.choice(SURROGATES), "value": float("nan")}),
                          "error", "config.set bad key, NaN")),
        (6, lambda: Frame(_huge_number(ident(), rng.randint(300, 5000)), "error", "huge number")),
        (6, lambda: Frame(deep(rng.choice([201, 999, 1000, 5000, 50_000]), rng), "error", "deep")),
        (4, lambda: Frame(b'{"type":"rpc","id":1,"method":"status","params":{"a":NaN,"b":Infinity}' + b"\n", "error",
                          "NaN literal")),
        (2, lambda: Frame(b'{"type":"chat","text":"' + b"x" * (SOCKET_MAX_FRAME - 20) + b'"}\n', "error", "huge")),
        (1, lambda: Frame(_json({"type": "chat", "text": "I like fuzz " + rng.choice(SURROGATES)}), "turn",
                          "chat with a lone surrogate")),
        (3, lambda: Frame(rpc("status", {"x": rng.choice(SURROGATES)}), "ok", "status with a surrogate param")),
    ]


class Generator:
    """Malformed socket frames from a seed; `ident` gives the RPC ids (the caller tracks which are owed)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self._next = 10_000
        kinds = _socket_kinds(self.rng, self._ident)
        self._makers = [make for _, make in kinds]
        self._weights = [w for w, _ in kinds]

    def _ident(self) -> int:
        self._next += 1
        return self._next

    def frame(self) -> Frame:
        return self.rng.choices(self._makers, self._weights)[0]()
