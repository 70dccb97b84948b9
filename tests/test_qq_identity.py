"""Who is speaking, through the shipped QQ plugin, a fake OneBot v11 and a real daemon.

Two QQ users talk to the bot in one group. With their accounts linked to
people (``homeagent identity link``, the real CLI over the real socket), what
each says is remembered as said by that person, and the facts the rule
distiller extracts are about that person: before identities, both were "user"
and Bob's "I live in Paris" replaced Ada's "I live in Oslo".
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from homeagent.daemon import Daemon
from homeagent.memory.context import event_speaker
from tests.conftest import run_cli
from tests.fakes.onebot import FakeOneBot, at, text
from tests.test_qq_e2e import ADA, BOB, GROUP, connected, enable_qq, reply_text, tool

pytestmark = pytest.mark.xdist_group("processes")

CY = 10003


@pytest.fixture
async def fake() -> AsyncIterator[FakeOneBot]:
    bot = await FakeOneBot(token="s3cret").start()
    try:
        yield bot
    finally:
        await bot.close()


async def _ask(fake: FakeOneBot, user: int, words: str, nickname: str) -> dict[str, Any]:
    before = len(fake.actions)
    await fake.send(fake.group_message(GROUP, user, [at(fake.self_id), text(f" {words}")], nickname=nickname))
    return await fake.wait_action("send_group_msg", after=before)


async def test_two_people_in_one_group_each_keep_their_own_facts(daemon: Daemon, fake: FakeOneBot) -> None:
    data = daemon.paths.root
    linked = await run_cli(data, "identity", "link", "qq", str(ADA), "Ada")
    assert linked.code == 0 and f"qq:{ADA} is now Ada" in linked.out, linked
    assert (await run_cli(data, "identity", "link", "qq", str(BOB), "Bob")).code == 0
    me = await run_cli(data, "identity", "link", "qq", "10009", "user")
    assert me.code == 1 and "owner" in me.err, "nobody can be linked under the owner's name except with --owner"

    await enable_qq(daemon, ws_url=fake.url)
    await connected(daemon, fake)
    assert "Noted: I live in Oslo" in reply_text(await _ask(fake, ADA, "I live in Oslo", "ada_qq"))
    assert "Noted: I live in Paris" in reply_text(await _ask(fake, BOB, "I live in Paris", "bobby"))
    await _ask(fake, CY, "I live in Rome", "Cy")  # nobody linked this account

    said = {e.input.split("] ", 1)[-1].strip(): event_speaker(e) for e in daemon.context.timeline() if e.kind == "user"}
    assert said == {"I live in Oslo": "Ada", "I live in Paris": "Bob", "I live in Rome": f"qq:{CY}"}, said

    await daemon.distiller.run_once()
    ada = await tool(daemon, "person_query", {"name": "Ada"})
    bob = await tool(daemon, "person_query", {"name": "Bob"})
    assert ada.status == "ok" and bob.status == "ok", (ada, bob)
    assert "Oslo" in str(ada.result) and "Paris" not in str(ada.result), ada.result
    assert "Paris" in str(bob.result) and "Oslo" not in str(bob.result), bob.result
    owner = await tool(daemon, "person_query", {"name": "user"})
    assert "Oslo" not in str(owner.result) and "Paris" not in str(owner.result), "not the owner's facts"

    # linking an account later carries what was learned about it over to the person
    before = await tool(daemon, "person_query", {"name": f"qq:{CY}"})
    assert "Rome" in str(before.result), before.result
    linked_cy = await run_cli(data, "identity", "link", "qq", str(CY), "Cy")
    assert linked_cy.code == 0, linked_cy
    cy = await tool(daemon, "person_query", {"name": "Cy"})
    assert cy.status == "ok" and "Rome" in str(cy.result), cy.result
    # re-linking moves nothing: Bob's facts never become Ada's
    assert (await run_cli(data, "identity", "link", "qq", str(BOB), "Ada")).code == 0
    assert "Paris" not in str((await tool(daemon, "person_query", {"name": "Ada"})).result)
    assert (await run_cli(data, "identity", "link", "qq", str(BOB), "Bob")).code == 0

    listed = await run_cli(data, "identity", "list")
    assert f"qq:{ADA}" in listed.out and "Ada" in listed.out and "Bob" in listed.out, listed.out
    gone = await run_cli(data, "identity", "unlink", "qq", str(BOB))
    assert gone.code == 0
    again = await run_cli(data, "identity", "unlink", "qq", str(BOB))
    assert again.code == 1 and "not linked" in again.err
    assert daemon.identities.speaker("qq", str(BOB), "bobby") == f"qq:{BOB}"


async def test_the_owners_own_account_speaks_as_the_owner(daemon: Daemon, fake: FakeOneBot) -> None:
    daemon.config.set("core.memory.owner_name", "Zed")
    assert (await run_cli(daemon.paths.root, "identity", "link", "qq", str(ADA), "--owner")).code == 0
    await enable_qq(daemon, ws_url=fake.url)
    await connected(daemon, fake)
    await fake.send(fake.private_message(ADA, "I live in Bergen", nickname="whatever"))
    await fake.wait_action("send_private_msg")
    await daemon.distiller.run_once()
    zed = await tool(daemon, "person_query", {"name": "Zed"})
    assert zed.status == "ok" and "Bergen" in str(zed.result), zed.result
    speakers = [event_speaker(e) for e in daemon.context.timeline() if e.kind == "user"]
    assert speakers == ["Zed"]
    await asyncio.sleep(0)


async def test_bad_links_get_a_clear_error_and_change_nothing(daemon: Daemon) -> None:
    data = daemon.paths.root
    for args, why in ((("qq q", "1", "Ada"), "channel must be"), (("qq", "1 2", "Ada"), "account must be"),
                      (("qq", "10001"), "name the person"), (("qq", "10001", "@owner"), "reserved"),
                      (("qq", "10001", "Ada", "--owner"), "not both")):
        result = await run_cli(data, "identity", "link", *args)
        assert result.code != 0 and why in result.err + result.out, (args, result)
    assert daemon.identities.links() == []
    assert "no linked accounts" in (await run_cli(data, "identity", "list")).out
