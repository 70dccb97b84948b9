"""NaN, infinities, out-of-range numbers and bad names at every boundary: a clear error, nothing stored (issue 22).

Python's ``json`` reads ``NaN``, ``Infinity`` and 5,000-digit integers that no
other JSON reader accepts, and ``1e400`` decodes to infinity. A setting holding
one could never be shown in the web UI (its JSON is not JSON), a duration of
10^20 hours overflows date arithmetic, and a key with a NUL or 5,000 characters
is unreadable wherever it is listed. Each boundary is tested through its real
interface: the config store on a real SQLite file, the daemon's Unix socket,
its HTTP API over loopback, and the plugin protocol's frame parser.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from homeagent.config import ConfigRegistry, core_defs
from homeagent.config.values import ConfigError
from homeagent.daemon import Daemon
from homeagent.sdk.protocol import ProtocolError, parse
from homeagent.text import loads
from tests.fakes.webui_fixtures import start_web
from tests.test_input_reliability import Raw

BIG = "9" * 400


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b'{"a": NaN}', "NaN is not a number JSON allows"),
        (b'{"a": [1, -Infinity]}', "-Infinity is not a number JSON allows"),
        (b'{"a": 1e400}', "inf is out of range"),
        (b'{"a": {"b": -1e999}}', "-inf is out of range"),
        (b'{"a": ' + BIG.encode() + b"}", "400 digits) is out of range"),
        # a surrogate sends the frame down the slow path: the checks hold there too
        (b'{"s": "\\ud800", "a": NaN}', "NaN is not a number JSON allows"),
        (b'{"s": "\\ud800", "a": ' + BIG.encode() + b"}", "out of range"),
    ],
)
def test_the_one_json_reader_of_every_boundary_refuses_what_no_one_could_read_back(raw: bytes, says: str) -> None:
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        loads(raw)
    assert loads(b'{"a": 1.5, "b": -9007199254740993, "c": 18446744073709551615}')["c"] == 2**64 - 1


def test_plugin_rpc_frames_with_nan_or_huge_numbers_are_parse_errors_that_say_why() -> None:
    for frame, says in (
        ('{"id": 1, "method": "settings.setPlugin", "params": {"key": "n", "value": NaN}}', "NaN"),
        ('{"id": 2, "method": "settings.setPlugin", "params": {"key": "n", "value": 1e400}}', "out of range"),
        ('{"id": 3, "method": "settings.setPlugin", "params": {"key": "n", "value": ' + BIG + "}}", "out of range"),
    ):
        with pytest.raises(ProtocolError, match=says) as caught:
            parse(frame)
        assert caught.value.code == -32700  # parse error: the plugin's SDK raises it to the plugin's code


BAD_VALUES: list[tuple[str, Any, str]] = [
    ("core.llm.temperature", float("nan"), "not a finite number"),
    ("core.llm.temperature", "Infinity", "not a finite number"),
    ("core.llm.temperature", 2.5, "above the maximum of 2"),
    ("core.llm.max_tokens", 10**30, "out of range"),
    ("core.llm.max_tokens", int(BIG), "out of range"),
    ("core.llm.max_tokens", BIG, "out of range"),
    ("core.llm.max_tokens", 20_000_000, "above the maximum"),
    ("core.agent.context_top_k", 0, "below the minimum of 1"),
    ("core.agent.child_timeout", "99999999999999999999h", "longest duration allowed"),
    ("core.agent.child_timeout", 1e300, "longest duration allowed"),
    ("core.agent.child_timeout", "30d", "above the maximum"),
    ("core.agent.child_timeout", float("nan"), "not a valid number of seconds"),
    ("core.approvals.rules", "[NaN]", "NaN is not a number JSON allows"),
    ("core.approvals.rules", [{"tool": "x", "n": float("inf")}], "finite numbers only"),
    ("plugin.someplugin.level", float("nan"), "not a finite number"),
    ("plugin.someplugin.level", {"deep": [float("-inf")]}, "not a finite number"),
    ("plugin.someplugin.level", 10**40, "out of range"),
]


@pytest.mark.parametrize(("key", "value", "says"), BAD_VALUES)
def test_config_refuses_a_bad_number_with_a_clear_error_and_keeps_the_old_value(
    tmp_path: Path, key: str, value: Any, says: str
) -> None:
    reg = ConfigRegistry(tmp_path / "config.db")
    for d in core_defs(tmp_path):
        reg.register_def(d)
    before = reg.get(key)
    with pytest.raises(ConfigError, match=says) as caught:
        reg.set(key, value)
    assert len(str(caught.value)) < 300
    reg.close()
    reopened = ConfigRegistry(tmp_path / "config.db")  # nothing reached the file either
    for d in core_defs(tmp_path):
        reopened.register_def(d)
    assert reopened.get(key) == before
    reopened.close()


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("plugin.someplugin.b\x00d", "cannot contain '\\x00'"),
        ("plugin.someplugin.tab\there", "cannot contain '\\t'"),
        ("plugin.someplugin.\ufffd", "cannot contain"),
        ("plugin.someplugin..x", "no empty parts"),
        ("plugin.someplugin.x.", "no empty parts"),
        ("plugin.someplugin." + "k" * 300, "at most 256 characters"),
        ("x" * 5000, "at most 256 characters"),
    ],
)
def test_config_refuses_a_bad_name_in_a_short_message(tmp_path: Path, key: str, says: str) -> None:
    reg = ConfigRegistry(tmp_path / "config.db")
    with pytest.raises(ConfigError, match=re.escape(says)) as caught:
        reg.set(key, "v")
    assert len(str(caught.value)) < 300, "a 5,000-character name is not echoed whole"
    assert reg.list("plugin.someplugin") == {}
    reg.close()


async def test_socket_rpc_with_nan_or_huge_numbers_gets_an_error_frame_and_nothing_changes(daemon: Daemon) -> None:
    key = "core.llm.temperature"
    before = daemon.config.get(key)
    raw = await Raw.connect(daemon.paths.socket)
    try:
        for literal, says in (("NaN", "NaN"), ("Infinity", "Infinity"), ("1e400", "out of range"),
                              (BIG, "out of range")):
            await raw.write(b'{"type": "rpc", "id": 1, "method": "config.set", "params": {"key": "' + key.encode()
                            + b'", "value": ' + literal.encode() + b"}}\n")
            error = await raw.frame()
            assert error["type"] == "error" and says in error["message"], (literal, error)
        # a number that reads as JSON but is out of the setting's range: the RPC's own error
        await raw.write(json.dumps({"type": "rpc", "id": 2, "method": "config.set",
                                    "params": {"key": key, "value": 7}}).encode() + b"\n")
        refused = await raw.frame()
        assert refused["type"] == "rpc_error" and "above the maximum of 2" in str(refused["error"]), refused
        await raw.write(json.dumps({"type": "rpc", "id": 3, "method": "config.get", "params": {"key": key}}).encode()
                        + b"\n")
        answer = await raw.frame()
        assert answer["type"] == "rpc_result" and answer["id"] == 3, answer
    finally:
        await raw.close()
    assert daemon.config.get(key) == before


async def test_http_settings_with_nan_huge_or_out_of_range_numbers_are_400_and_nothing_is_stored(
    daemon: Daemon,
) -> None:
    web = await start_web(daemon)
    before = {k: daemon.config.get(k) for k in ("core.llm.temperature", "core.llm.max_tokens")}
    try:
        async with web.client() as c:
            for body, says in (
                (b'{"core.llm.max_tokens": 100, "core.llm.temperature": NaN}', "NaN"),
                (b'{"core.llm.max_tokens": 100, "core.llm.temperature": 1e400}', "out of range"),
                (b'{"core.llm.max_tokens": ' + BIG.encode() + b"}", "out of range"),
                (b'{"core.llm.max_tokens": 100, "core.llm.temperature": 9}', "above the maximum"),
                (b'{"core.llm.max_tokens": 100, "core.agent.child_timeout": "99999999999h"}', "longest duration"),
            ):
                answer = await c.put("/api/v1/settings", content=body, headers={"Content-Type": "application/json"})
                assert answer.status_code == 400, (body, answer.text)
                assert says in answer.text, (body, answer.text)
            chat = await c.post("/api/v1/chat", content=b'{"text": "hi", "client_msg_id": NaN}',
                                headers={"Content-Type": "application/json"})
            assert chat.status_code == 400 and "NaN" in chat.text
    finally:
        await web.server.close()
    # all or nothing: the valid max_tokens next to a bad value was not stored either
    assert {k: daemon.config.get(k) for k in before} == before


async def test_http_path_ids_and_host_ports_out_of_range_or_not_ascii_are_refused_not_500(daemon: Daemon) -> None:
    """Found by schemathesis: `DELETE /api/v1/approvals/rules/<20 digits>` answered 500 (SQLite's integer overflow)."""
    web = await start_web(daemon)
    try:
        async with web.client() as c:
            for rule, status in (("9" * 20, 400), ("\u00b2", 400), ("12", 404)):
                answer = await c.delete(f"/api/v1/approvals/rules/{rule}")
                assert answer.status_code == status, (rule, answer.text)
            # "²" is a digit to str.isdigit, not to int(): a Host port made of it is not a port
            odd_host = await c.get("/api/v1/status", headers={"Host": "127.0.0.1:\u00b2".encode("latin-1")})
            assert odd_host.status_code < 500, odd_host.text
    finally:
        await web.server.close()
