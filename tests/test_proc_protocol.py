"""Protocol v1 pieces without processes: framing, decoding, stage changes, capabilities, and a fuzzed host."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from homeagent.agent.stages import StagePermissionError
from homeagent.memory.cleaners import CleanerChain
from homeagent.plugins.proc.capabilities import CAPABILITIES, METHOD_CAPABILITY, Capabilities
from homeagent.plugins.proc.connection import Pipes
from homeagent.plugins.proc.host import HostSession
from homeagent.plugins.proc.stagewire import StageChangeError, apply_changes
from homeagent.plugins.services import HostSDK, PluginServices
from homeagent.sdk.protocol import (
    ErrorCode,
    FrameBuffer,
    Oversized,
    ProtocolError,
    Request,
    Response,
    encode,
    encode_request,
    parse,
)
from homeagent.sdk.remote import changes_between, context_from
from homeagent.sdk.types import MemItem, Stage, StageContext, ToolCall
from tests.fakes.plugins_host import make_services

# ---------------------------------------------------------------- framing


def test_frames_split_across_chunks_and_glued_together() -> None:
    buf = FrameBuffer(max_frame=100)
    assert buf.feed(b'{"id":1,') == []
    assert buf.feed(b'"result":2}\n{"id":2') == [b'{"id":1,"result":2}']
    assert buf.feed(b',"result":3}\r\n\n\n{"method":"x"}\n') == [b'{"id":2,"result":3}', b'{"method":"x"}']
    assert buf.pending == 0


def test_an_oversized_frame_is_skipped_to_its_end_without_holding_it() -> None:
    buf = FrameBuffer(max_frame=64)
    head = b'{"id": 7, "method": "tool.register", "params": {"pad": "'
    out = buf.feed(head + b"x" * 50)
    assert out == [] and buf.pending == 0, "nothing is buffered past the limit"
    out = buf.feed(b"y" * 10_000)
    out += buf.feed(b'"}}\n{"id":8,"result":1}\n')
    assert isinstance(out[0], Oversized) and out[0].size == len(head) + 50 + 10_000 + 3
    assert out[0].guess() == (7, "tool.register")
    assert out[1] == b'{"id":8,"result":1}', "the next frame is intact"
    whole = buf.feed(b'{"id":"abc","result":"' + b"z" * 100 + b'"}\n')
    assert isinstance(whole[0], Oversized) and whole[0].guess() == ("abc", None)


def test_parse_classifies_and_rejects_with_json_rpc_codes() -> None:
    assert parse(b'{"id":3,"method":"ping"}') == Request("ping", {}, 3)
    assert parse(b'{"method":"event","params":{"a":1},"id":0}') == Request("event", {"a": 1}, None)
    assert parse(b'{"id":4,"result":null}') == Response(4, None)
    err = parse(b'{"id":5,"error":{"code":-32001,"message":"no","data":{"capability":"llm"}}}')
    assert isinstance(err, Response) and err.error is not None and err.error.code == -32001
    cases = {
        b"not json": ErrorCode.PARSE_ERROR,
        b"\xff\xfe": ErrorCode.PARSE_ERROR,
        b"[1,2]": ErrorCode.INVALID_REQUEST,
        b'{"id":true,"method":"x"}': ErrorCode.INVALID_REQUEST,
        b'{"id":9,"method":""}': ErrorCode.INVALID_REQUEST,
        b'{"id":9,"method":"x","params":[1]}': ErrorCode.INVALID_PARAMS,
        b'{"id":9}': ErrorCode.INVALID_REQUEST,
        b"[" * 100_000: ErrorCode.PARSE_ERROR,
    }
    for frame, code in cases.items():
        with pytest.raises(ProtocolError) as info:
            parse(frame)
        assert info.value.code == code, frame[:40]
    with pytest.raises(ProtocolError) as info:
        parse(b'{"id":9,"method":"x","params":"s"}')
    assert info.value.id == 9, "a request with bad params can still be answered"


def test_encode_carries_values_json_cannot() -> None:
    frame = encode({"id": 1, "result": {"set": {3, 1}, "nan": float("nan"), "call": ToolCall("c", "t"), "b": b"hi"}})
    assert frame.endswith(b"\n") and frame.count(b"\n") == 1
    result = json.loads(frame)["result"]
    assert result["set"] == [1, 3] and result["nan"] == "nan" and result["call"]["name"] == "t" and result["b"] == "hi"
    assert encode_request(2, "x", {"s": "line\nbreak ü"}).count(b"\n") == 1


# ---------------------------------------------------------------- stage changes


def test_changes_apply_all_or_nothing_under_the_permission_matrix() -> None:
    ctx = StageContext(raw_message="hi", context_msgs=[{"role": "user", "content": "hi"}])
    ops = [
        {"op": "append", "field": "context_msgs", "values": [{"role": "system", "content": "a"}]},
        {"op": "set_key", "field": "extra", "key": "k", "value": [1]},
        {"op": "set", "field": "memory", "value": [{"role": "user", "content": "m", "score": 1}]},
    ]
    assert apply_changes(ctx, Stage.PRE_ACTION, ops) == 3
    assert ctx.context_msgs[-1] == {"role": "system", "content": "a"} and ctx.extra == {"k": [1]}
    assert ctx.memory == [MemItem("user", "m", 1)]
    before = (list(ctx.context_msgs), dict(ctx.extra))
    with pytest.raises(StagePermissionError, match=r"ctx\.raw_message is read-only in stage 'pre_action'"):
        apply_changes(ctx, Stage.PRE_ACTION, [ops[0], {"op": "set", "field": "raw_message", "value": "x"}])
    with pytest.raises(StageChangeError, match="must be a string"):
        apply_changes(ctx, Stage.ON_INPUT, [{"op": "set", "field": "raw_message", "value": 5}])
    with pytest.raises(StageChangeError, match="no field 'nope'"):
        apply_changes(ctx, Stage.PRE_ACTION, [{"op": "set", "field": "nope", "value": 1}])
    with pytest.raises(StageChangeError, match="unknown op"):
        apply_changes(ctx, Stage.PRE_ACTION, [{"op": "merge", "field": "extra", "value": {}}])
    assert (ctx.context_msgs, ctx.extra) == before, "a rejected change list changed nothing"


def test_tool_call_is_updated_in_place() -> None:
    call = ToolCall("c1", "t", {"a": 1})
    ctx = StageContext(tool_call=call)
    apply_changes(ctx, "before_toolcall", [{"op": "set", "field": "tool_call", "value": {"denied": True, "deny_reason": "no"}}])
    assert ctx.tool_call is call and call.denied and call.deny_reason == "no" and call.arguments == {"a": 1}
    with pytest.raises(StageChangeError, match="denied has the wrong type"):
        apply_changes(ctx, "before_toolcall", [{"op": "set", "field": "tool_call", "value": {"denied": "yes"}}])


def test_plugin_side_diff_turns_edits_into_appends() -> None:
    sent = {"context_msgs": [{"role": "user", "content": "hi"}], "extra": {"a": 1, "b": 2}, "raw_message": "x"}
    ctx = context_from(sent)
    ctx.context_msgs.append({"role": "system", "content": "mine"})
    ctx.extra["a"] = 5
    del ctx.extra["b"]
    ops = changes_between(sent, ctx, ["context_msgs", "extra", "response"])
    assert sent["context_msgs"] == [{"role": "user", "content": "hi"}], "the received snapshot is not mutated"
    assert ops == [
        {"op": "append", "field": "context_msgs", "values": [{"role": "system", "content": "mine"}]},
        {"op": "set_key", "field": "extra", "key": "a", "value": 5},
        {"op": "del_key", "field": "extra", "key": "b"},
    ]
    call = {"id": "c1", "name": "t", "arguments": {"x": 1}}
    tool_ctx = context_from({"tool_call": call}, ["tool_call"])
    assert tool_ctx.tool_call is not None
    tool_ctx.tool_call.arguments["x"] = 2
    assert changes_between({"tool_call": call}, tool_ctx, ["tool_call"])[0]["value"]["arguments"] == {"x": 2}
    assert call["arguments"] == {"x": 1}
    ctx.context_msgs = [{"role": "system", "content": "replaced"}]
    ctx.response = "stop"
    ops = changes_between(sent, ctx, ["context_msgs", "response"])
    assert ops == [
        {"op": "set", "field": "context_msgs", "value": [{"role": "system", "content": "replaced"}]},
        {"op": "set", "field": "response", "value": "stop"},
    ]


def test_capabilities_from_manifest() -> None:
    caps, warnings = Capabilities.from_manifest(["memory", "tools", "net", "telepathy"])
    assert caps.granted == {"memory.read", "memory.write", "net"}
    assert warnings == [f"unknown capability 'telepathy' ignored (known: {', '.join(sorted(CAPABILITIES))})"]
    caps.check("memory.commit")
    caps.check("tool.register")
    with pytest.raises(Exception, match="needs the 'llm' capability"):
        caps.check("llm.listSources")


# ---------------------------------------------------------------- the host decoder, fuzzed

_METHODS = [*sorted(METHOD_CAPABILITY), "events.publish", "nope", "plugin.start", "tool.invoke"]
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**60), 2**60) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_params = st.fixed_dictionaries(
    {},
    optional={
        "name": st.sampled_from(["t1", "t2", "output", "x y", ""]) | st.text(max_size=10),
        "stage": st.sampled_from(["on_input", "pre_action", "bogus"]),
        "handler": st.text(max_size=5),
        "key": st.text(max_size=5) | st.integers(),
        "types": st.none() | st.lists(st.text(max_size=5), max_size=2),
        "parameters": st.just({"type": "object"}) | _json,
        "subscription": st.text(max_size=4),
        "text": st.text(max_size=10),
    },
)
_request = st.builds(
    lambda ident, method, params: {"id": ident, "method": method, "params": params},
    st.none() | st.integers(0, 50) | st.text(max_size=3),
    st.sampled_from(_METHODS),
    _params,
)
_frame = (
    _request.map(lambda m: json.dumps(m).encode())
    | st.builds(lambda i, r: json.dumps({"id": i, "result": r}).encode(), st.integers(0, 9), _json)
    | _json.map(lambda v: json.dumps(v).encode())
    | st.binary(max_size=60)
)


def test_random_frames_never_crash_the_host_or_leak_registrations(tmp_path: Path) -> None:
    """Whatever bytes arrive, the host answers with well-formed frames and a closed session leaves nothing behind.

    One set of subsystems serves every example, so a registration leaked by
    any example would also show up in the next one.
    """
    loop = asyncio.new_event_loop()
    services = loop.run_until_complete(_services(tmp_path))

    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
    @given(frames=st.lists(_frame, max_size=25), cut=st.integers(1, 97))
    def check(frames: list[bytes], cut: int) -> None:
        loop.run_until_complete(_fuzz(services, frames, cut))

    try:
        check()
    finally:
        loop.run_until_complete(services.events.close())
        services.config.close()
        loop.close()


async def _services(tmp_path: Path) -> PluginServices:
    return make_services(tmp_path / "fuzz", cleaners=CleanerChain())


async def _fuzz(services: PluginServices, frames: list[bytes], cut: int) -> None:
    written: list[bytes] = []
    sdk = HostSDK(services, "fuzz")
    caps, _ = Capabilities.from_manifest(["stages", "events", "memory", "io.inject", "settings.core", "llm"])
    session = HostSession("fuzz", Pipes(write=written.append), caps)
    session.bind(sdk)
    stream = b"\n".join(frames) + b"\n"
    for i in range(0, len(stream), cut):
        session.connection.feed(stream[i : i + cut])
    for _ in range(5):
        await asyncio.sleep(0)
    for line in b"".join(written).splitlines():
        answer = json.loads(line)  # every answer is a well-formed frame
        assert "result" in answer or ("error" in answer and isinstance(answer["error"]["code"], int))
    session.close("fuzz over")
    await asyncio.sleep(0)
    assert [t.name for t in services.tools.tools()] == []
    assert all(not services.stages.has_handlers(s) for s in Stage)
    assert services.channels.list() == [] and services.cleaners.names() == []
    assert services.events.stats() == [] and session.registrations() == []


async def test_results_of_registration_calls(tmp_path: Path) -> None:
    services = make_services(tmp_path / "d")
    written: list[bytes] = []
    session = HostSession("p", Pipes(write=written.append), Capabilities.from_manifest(["stages"])[0])
    session.connection.feed(encode_request(1, "tool.register", {"name": "p_x"}))
    session.bind(HostSDK(services, "p"))
    for ident, (method, params) in enumerate(
        [
            ("tool.register", {"name": "p_x", "parameters": {"type": "object"}}),
            ("tool.register", {"name": "p_x"}),
            ("tool.register", {"name": "p_bad", "parameters": {"type": "string"}}),
            ("stage.register", {"stage": "nowhere"}),
            ("stage.register", {"stage": "pre_action", "fields": ["raw_message", "lock"]}),
        ],
        start=2,
    ):
        session.connection.feed(encode_request(ident, method, params))
    answers: dict[int, Any] = {json.loads(x)["id"]: json.loads(x) for x in b"".join(written).splitlines()}
    assert answers[1]["error"]["code"] == ErrorCode.UNAVAILABLE and "once plugin.init" in answers[1]["error"]["message"]
    assert answers[2] == {"id": 2, "result": {"name": "p_x"}}
    assert "already registered by this plugin" in answers[3]["error"]["message"]
    assert answers[3]["error"]["data"]["type"] == "ValueError"
    assert "parameters must describe an object" in answers[4]["error"]["message"]
    assert "unknown stage 'nowhere'" in answers[5]["error"]["message"]
    assert "StageContext has no field 'lock'" in answers[6]["error"]["message"]
    session.close("done")
    assert "p_x" not in services.tools
    await services.events.close()
    services.config.close()
