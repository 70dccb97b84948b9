"""Group chats keep their own recent turns: two groups, or a group and the owner's own chat, never see each
other's turns in the prompt (the long-term memory stays one).

The offline provider answers only from what its prompt holds, so what it
can answer shows what each turn's prompt contained.
"""

from __future__ import annotations

from homeagent.daemon import Daemon
from homeagent.sdk.types import InjectOptions


async def _say(daemon: Daemon, text: str, group: str = "", user: str = "") -> str:
    result = await daemon.io.inject_sync(
        "test", "qq" if group or user else "cli", text, options=InjectOptions(group_id=group, user_id=user), timeout=30
    )
    assert result.ok, result
    return result.text


async def test_two_groups_and_the_owner_never_see_each_others_recent_turns(daemon: Daemon) -> None:
    assert "Noted" in await _say(daemon, "my name is Zed", group="777", user="10001")
    assert "Noted" in await _say(daemon, "my name is Ada", group="888", user="10002")
    assert "Noted" in await _say(daemon, "my name is Owner")

    assert "Your name is Zed." in await _say(daemon, "what is my name?", group="777", user="10001")
    assert "Your name is Ada." in await _say(daemon, "what is my name?", group="888", user="10002")
    assert "Your name is Owner." in await _say(daemon, "what is my name?")

    timeline = daemon.context.timeline()
    assert {e.meta.get("group_id", "") for e in timeline} == {"777", "888", ""}, "every turn is kept, scoped"


async def test_private_chats_of_different_people_never_see_each_others_recent_turns(daemon: Daemon) -> None:
    assert "Noted" in await _say(daemon, "my name is Ada", user="10001")  # Ada's private QQ chat
    assert "Noted" in await _say(daemon, "my name is Owner")  # the owner's terminal, later
    assert "Your name is Ada." in await _say(daemon, "what is my name?", user="10001")
    assert "Your name is Owner." in await _say(daemon, "what is my name?")
    assert "don't know" in await _say(daemon, "what is my name?", user="10002"), "Bob sees neither"

    # the owner's own QQ account (linked --owner) is the owner's conversation
    await daemon.identities.link("qq", "12345", owner=True)
    assert "Your name is Owner." in await _say(daemon, "what is my name?", user="12345")
    people = {e.meta.get("person") for e in daemon.context.timeline()}
    assert people == {"user", "qq:10001", "qq:10002"}, people
