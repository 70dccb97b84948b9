"""The offline provider answers from memory, never from the tool list or the rules of the system prompt."""

from __future__ import annotations

from typing import Any

from homeagent.agent.prompt import PromptBuilder, PromptInputs
from homeagent.providers.base import ChatRequest
from homeagent.providers.offline import OfflineProvider
from homeagent.sdk.types import ToolDef

TOOLS = [
    ToolDef(name="doc_query", description="Search the document memory; you can bring what you find back."),
    ToolDef(name="cmd_run", description="Run a shell command. What it prints comes back; you can do anything."),
    ToolDef(name="output_list_channels", description="Which channels can receive output, what they do."),
]


async def system_prompt(*sections: str) -> str:
    builder = PromptBuilder(lambda: "")
    for i, text in enumerate(sections):
        builder.add_section(f"s{i}", lambda _inputs, t=text: t, order=30 + i)
    return await builder.build(PromptInputs(user_text="", tools=TOOLS))


async def ask(text: str, system: str, history: list[dict[str, Any]] | None = None) -> str:
    messages = [{"role": "system", "content": system}, *(history or []), {"role": "user", "content": text}]
    return (await OfflineProvider().chat(ChatRequest(messages=messages))).content


async def test_what_can_you_do_is_not_answered_from_the_tool_list_or_rules() -> None:
    system = await system_prompt()
    assert "【可用工具列表】" in system and "- cmd_run:" in system
    for question in ("hello, what can you do?", "what do the tools do?", "how can I send output to a channel?"):
        reply = await ask(question, system)
        assert "From memory" not in reply, reply
        for tool in TOOLS:
            assert tool.description[:20] not in reply
        assert "output_send" not in reply and "打断消息" not in reply


async def test_answers_come_from_the_memory_blocks_and_the_conversation() -> None:
    system = await system_prompt(
        "【记忆索引】 关联 2 个记忆实体，高频：Zed 索引: Zed | 需更多细节请用 memory_recall 查询\n- Zed --owns--> a red canoe",
        "【相关记忆文档】\n- [2024-05-01 10:00] The canoe paddles hang in the shed behind the house (id d1)",
        "## 图记忆工具\n- memory_recall(query_intent=...): 查询相关事实；canoe paddles are not here",
    )
    reply = await ask("where are the canoe paddles?", system)
    assert reply.startswith("[offline] From memory") and "hang in the shed" in reply
    assert "red canoe" in await ask("what canoe do I own?", system)
    # what the user said earlier, and recalled documents in the timeline, count as memory too
    history = [
        {"role": "user", "content": "The spare key is under the blue flower pot."},
        {"role": "assistant", "content": "[offline] I received it."},
        {"role": "system", "content": "【recalled memory · 2024-01-02 09:00】\nThe wifi password is on the fridge."},
    ]
    plain = await system_prompt()
    assert "blue flower pot" in await ask("where is the spare key?", plain, history)
    assert "on the fridge" in await ask("where is the wifi password?", plain, history)
    # a fact statement in the tool list is not taken for the user's own
    tricky = [*TOOLS, ToolDef(name="whoami", description="my name is Root, the system user")]
    builder = PromptBuilder(lambda: "")
    prompt = await builder.build(PromptInputs(user_text="", tools=tricky))
    assert "Root" not in await ask("what is my name?", prompt)
    assert "Your name is Zed." in await ask("what is my name?", prompt, [{"role": "user", "content": "my name is Zed"}])
