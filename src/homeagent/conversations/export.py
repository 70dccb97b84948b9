"""A conversation as a file: Markdown to read, JSON to keep or import elsewhere.

Both hold what the chat showed: the JSON every entry as the API gives it,
the Markdown the same in prose (reasoning and tool calls folded in
``<details>``, which GitHub and most Markdown viewers render collapsed).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from homeagent.conversations.store import Conversation, Entry

FORMAT = "homeagent.conversation/1"
WHO = {"user": "You", "interrupt": "You (interrupt)", "assistant": "HomeAgent", "proactive": "HomeAgent (sent by itself)"}


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _fence(text: str, lang: str = "") -> str:
    """``text`` in a code fence longer than any run of backticks inside it."""
    longest, current = 0, 0
    for ch in text:
        current = current + 1 if ch == "`" else 0
        longest = max(longest, current)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


def _pretty(value: Any) -> str:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith(("{", "[")):
            try:
                return json.dumps(json.loads(text), ensure_ascii=False, indent=2)
            except ValueError:
                pass
        return value
    return json.dumps(value, ensure_ascii=False, indent=2)


def to_json(conversation: Conversation, entries: Sequence[Entry]) -> dict[str, Any]:
    return {"format": FORMAT, "exported": time.time(), "conversation": conversation.to_dict(),
            "entries": [e.to_dict() for e in entries]}


def to_markdown(conversation: Conversation, entries: Sequence[Entry]) -> str:
    title = conversation.title or f"Conversation {conversation.id}"
    out = [f"# {title}", "", f"_Exported from HomeAgent on {_when(time.time())}: {len(entries)} entries, "
           f"started {_when(conversation.created)}._", ""]
    for entry in entries:
        data = entry.data
        out.append(f"### {WHO.get(entry.kind, entry.kind)} · {_when(entry.ts)}")
        out.append("")
        if data.get("reasoning"):
            out += ["<details><summary>Reasoning</summary>", "", _fence(str(data["reasoning"])), "", "</details>", ""]
        for tool in data.get("tools") or []:
            out += [f"<details><summary>Tool <code>{tool.get('tool', '?')}</code> ({tool.get('status', '')})"
                    "</summary>", ""]
            if tool.get("arguments"):
                out += ["Arguments:", "", _fence(_pretty(tool["arguments"]), "json"), ""]
            if tool.get("result"):
                out += ["Result:", "", _fence(_pretty(tool["result"])), ""]
            out += ["</details>", ""]
        if data.get("retried"):
            out += ["_(interrupted: the model answered again)_", ""]
        if entry.text:
            out += [entry.text, ""]
        if data.get("file"):
            file = data["file"]
            out += [f"[{file.get('name') or file.get('digest', 'file')}]({file.get('url', '')})", ""]
        if data.get("stopped"):
            out += ["_(stopped)_", ""]
        if data.get("error"):
            out += [f"_Error: {data['error']}_", ""]
        if data.get("fallback_from"):
            out += [f"_Answered by {data.get('source', '?')}: {data['fallback_from']} did not answer._", ""]
    return "\n".join(out).rstrip() + "\n"
