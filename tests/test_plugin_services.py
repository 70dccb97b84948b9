"""What the daemon hands plugins, through its own wiring: the people in memory, and settings within limits.

A subprocess plugin asks the read-only ``social.*`` RPC methods (they answered
-32004 before: the host looked up method names the social graph did not
have); an in-process plugin gets the full social API, writes included; a
subprocess plugin holding ``settings.core`` still cannot change owner-only
settings. All are driven by the offline provider's ``/tool`` over the real
socket.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest

from homeagent.daemon import Daemon
from tests.conftest import offline_tool

pytestmark = pytest.mark.xdist_group("processes")

EXTERNAL = '''
from typing import Any


class SocialProbe:
    name = "socialprobe"

    async def start(self, sdk: Any) -> None:
        async def people(args: dict[str, Any]) -> Any:
            social = sdk.social
            out: dict[str, Any] = {"persons": await social.list_persons()}
            out["person"] = await social.get_person(args["name"])
            out["trait"] = await social.get_trait(args["name"], "hobby")
            out["relations"] = await social.get_relations(args["name"])
            out["network"] = await social.get_network(args["name"], 2)
            try:
                await social.get_person("Nobody Known")
            except Exception as exc:  # the host's error comes back as a readable message
                out["unknown"] = str(exc)
            return out

        sdk.register_tool("socialprobe_people", people, description="Read the social graph.",
                          parameters={"type": "object", "properties": {"name": {"type": "string"}},
                                      "required": ["name"]})

    async def stop(self) -> None:
        pass


def create_plugin(name: str, config: Any) -> SocialProbe:
    return SocialProbe()
'''

INTERNAL = '''
from typing import Any


class SocialWriter:
    name = "socialwriter"

    async def start(self, sdk: Any) -> None:
        async def befriend(args: dict[str, Any]) -> Any:
            await sdk.social.set_trait(args["a"], "hobby", args["hobby"])
            return await sdk.social.relate(args["a"], "friend", args["b"])

        sdk.register_tool("socialwriter_befriend", befriend, description="Write to the social graph.",
                          parameters={"type": "object", "properties": {"a": {"type": "string"},
                                      "b": {"type": "string"}, "hobby": {"type": "string"}},
                                      "required": ["a", "b", "hobby"]})

    async def stop(self) -> None:
        pass


def create_plugin(name: str, config: Any) -> SocialWriter:
    return SocialWriter()
'''


def _install(daemon: Daemon, name: str, source: str, manifest: dict[str, Any]) -> None:
    folder = daemon.paths.plugins / name
    folder.mkdir(parents=True)
    (folder / "plugin.json").write_text(json.dumps({"name": name, "version": "1.0.0", "description": name, **manifest}))
    module = manifest["entry"].split(":")[0].split(".")[0]
    (folder / (manifest["entry"] if manifest["entry"].endswith(".py") else f"{module}.py")).write_text(
        textwrap.dedent(source)
    )


async def test_plugins_read_and_write_the_people_in_memory(daemon: Daemon) -> None:
    _install(daemon, "socialwriter", INTERNAL, {"entry": "main.py", "capabilities": ["tools", "memory.write"]})
    _install(daemon, "socialprobe", EXTERNAL, {
        "entry": "probe:create_plugin", "runtime": "process", "capabilities": ["tools", "memory.read"],
    })
    await daemon.plugins.reload_all()

    wrote = await offline_tool(daemon, "socialwriter_befriend", {"a": "Alice", "b": "Bob", "hobby": "sailing"})
    assert wrote["stored"] == ["Alice --friend--> Bob", "Bob --friend--> Alice"]

    seen = await offline_tool(daemon, "socialprobe_people", {"name": "Alice"})
    assert {p["name"] for p in seen["persons"]} == {"Alice", "Bob"}
    assert seen["person"]["name"] == "Alice" and seen["person"]["traits"] == {"hobby": "sailing"}
    assert seen["trait"] == {"person": "Alice", "trait": "hobby", "value": "sailing"}
    assert seen["relations"] == [{"relation": "friend", "person": "Bob", "direction": "out"}]
    assert {p["name"] for p in seen["network"]["people"]} == {"Alice", "Bob"}
    assert "Nobody Known" in seen["unknown"]


SETTER = '''
from typing import Any


class Setter:
    name = "setter"

    async def start(self, sdk: Any) -> None:
        async def setting(args: dict[str, Any]) -> Any:
            try:
                if args.get("plugin"):
                    sdk.settings.set_plugin(args["plugin"], args["key"], args["value"])
                else:
                    sdk.settings.set_core(args["key"], args["value"])
            except Exception as exc:
                return {"refused": str(exc)}
            return {"set": True}

        sdk.register_tool("setter_set", setting, description="Change a setting.",
                          parameters={"type": "object", "properties": {"key": {"type": "string"},
                                      "value": {}, "plugin": {"type": "string"}}, "required": ["key", "value"]})

    async def stop(self) -> None:
        pass


def create_plugin(name: str, config: Any) -> Setter:
    return Setter()
'''


async def test_a_plugin_with_settings_core_still_cannot_change_owner_only_settings(daemon: Daemon) -> None:
    _install(daemon, "setter", SETTER, {
        "entry": "setter:create_plugin", "runtime": "process", "capabilities": ["tools", "settings.core"],
    })
    await daemon.plugins.reload_all()
    before = {k: daemon.config.get(k) for k in ("core.agent.workdir", "plugin.cmd.allow_shell")}
    for args in (
        {"key": "core.agent.workdir", "value": "/"},
        {"key": "agent.workdir", "value": "/"},
        {"plugin": "cmd", "key": "allow_shell", "value": True},
    ):
        refused = await offline_tool(daemon, "setter_set", args)
        assert "owner-only" in refused["refused"], (args, refused)
    assert {k: daemon.config.get(k) for k in before} == before
    # what the capability is for still works
    assert await offline_tool(daemon, "setter_set", {"key": "core.agent.max_tool_turns", "value": 7}) == {"set": True}
    assert daemon.config.get("core.agent.max_tool_turns") == 7
