"""What a stalled web client can make the daemon hold: a turn's frames and the shared encoded-event cache.

(The end-to-end case, a real client that stops reading the event stream, is in test_webui_api.py.)
"""

from __future__ import annotations

from homeagent.events import EventBus
from homeagent.webui.sse import MAX_CHUNK_BYTES, FrameQueue, StreamRegistry, _chunks


def test_a_turn_s_text_deltas_are_bounded_in_bytes_and_the_response_still_arrives() -> None:
    queue = FrameQueue(max_text_bytes=10_000)
    for _ in range(100):  # 100 kB of deltas for a client that reads nothing
        queue.put({"type": "content_delta", "text": "x" * 1000})
    queue.put({"type": "tool_call", "tool": "t", "status": "ok", "result": "kept"})
    queue.put({"type": "response", "ok": True, "text": "x" * 100_000})
    frames = queue.take_all()
    deltas = [f for f in frames if f["type"] == "content_delta"]
    assert sum(len(f["text"]) for f in deltas) <= 10_000 and queue.dropped == 90
    assert [f["type"] for f in frames[-2:]] == ["tool_call", "response"]
    # once read, the room is there again
    queue = FrameQueue(max_text_bytes=10_000)
    for _ in range(30):
        queue.put({"type": "content_delta", "text": "y" * 1000})
        assert queue.take_all()
    assert queue.dropped == 0


def test_encoded_events_are_bounded_in_bytes_and_chunks_in_size() -> None:
    bus = EventBus()
    registry = StreamRegistry(encoded_bytes=100_000)
    for i in range(50):
        registry.encode(bus.publish("big", {"i": i, "text": "z" * 20_000}))
    assert registry._encoded_bytes <= 100_000 and len(registry._encoded) <= 5
    parts = [b"a" * 30_000] * 10 + [b"b" * (MAX_CHUNK_BYTES * 2)]
    chunks = list(_chunks(parts))
    assert b"".join(chunks) == b"".join(parts)
    assert all(len(c) <= MAX_CHUNK_BYTES for c in chunks[:-1]) and len(chunks[-1]) == MAX_CHUNK_BYTES * 2
