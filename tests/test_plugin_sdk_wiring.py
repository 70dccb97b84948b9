"""Every SDK service method, called by a plugin the daemon itself loaded, reaches its store.

The plugin services are built by ``Daemon.plugin_services`` and nowhere else;
these tests load the ``sdkprobe`` fixture through the daemon's own registry
(as a subprocess and in-process) and check the answers and the stores behind
them. The host once bound ``doc_memory.insert/query/stats`` to synchronous
store methods (SQLite and embedding on the event loop; ``insert`` of a dict
raised) and no test noticed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from homeagent.daemon import Daemon
from homeagent.plugins.services import PluginServices
from homeagent.sdk.api import DocMemoryAPI, KnowledgeAPI, MemoryAPI, TextMemoryAPI
from tests.conftest import offline_tool

PROBE = Path(__file__).parent / "fixtures" / "proc_plugins" / "sdkprobe"


def install_probe(daemon: Daemon, runtime: str) -> None:
    target = daemon.paths.plugins / "sdkprobe"
    shutil.copytree(PROBE, target)
    manifest = json.loads((target / "plugin.json").read_text())
    (target / "plugin.json").write_text(json.dumps({**manifest, "runtime": runtime}))


def test_the_daemon_hands_plugins_every_memory_layer_behind_its_sdk_protocol(daemon: Daemon) -> None:
    services = daemon.plugins.services
    assert isinstance(services, PluginServices)
    assert isinstance(services.memory, MemoryAPI) and isinstance(services.docs, DocMemoryAPI)
    assert isinstance(services.knowledge, KnowledgeAPI) and isinstance(services.text_memory, TextMemoryAPI)
    assert services.llm is daemon.llm and services.context is daemon.context and services.social is daemon.social


@pytest.mark.parametrize("runtime", ["process", "in-process"])
async def test_a_plugin_reaches_every_store_through_the_sdk(daemon: Daemon, runtime: str) -> None:
    install_probe(daemon, runtime)
    await daemon.plugins.reload_all()
    assert daemon.plugins.info("sdkprobe")["state"] == "running", daemon.plugins.info("sdkprobe")

    got = await offline_tool(daemon, "sdkprobe_run", {"tag": runtime})

    assert got["commit"]["added"] == 2
    assert [f"{runtime}-Ada", f"{runtime}-tea"] in got["recall"]
    assert got["relations"] == 2
    assert got["merge"] == 1 and got["purge"] == 1
    assert isinstance(got["insert_dict"], str) and isinstance(got["insert_text"], str)
    assert "boiler is serviced every October" in got["query"][0]
    assert got["doc_count"] >= 2
    assert got["kb_add"] == [f"{runtime}-wifi", False]
    assert got["kb_search"][0] == f"{runtime}-wifi" and f"{runtime}-wifi" in got["kb_list"]
    assert "offline" in got["llm_sources"] and got["llm_current"] in got["llm_sources"]

    # the stores themselves, not the plugin's view of them
    facts = {r.object: r for r in await daemon.graph.history(f"{runtime}-Ada", "likes")}
    assert facts[f"{runtime}-tea"].source == "plugin" and facts[f"{runtime}-tea"].current
    assert not facts[f"{runtime}-jazz"].current  # merged from Adah, then purged
    assert (await daemon.graph.entity(f"{runtime}-Adah")).name == f"{runtime}-Ada"  # type: ignore[union-attr]  # merged: an alias now
    assert any("the spare key" in d.content for d in await daemon.docs.aquery(f"{runtime} spare key", 3))
    assert (daemon.paths.knowledge / f"{runtime}-wifi" / "content.md").is_file()
    await daemon.textlog.flush()
    assert any(r["content"] == f"{runtime}: probe ran" and r["channel"] == "probe"
               for r in daemon.textlog.read_recent(20))


async def test_a_subprocess_plugin_manages_plugins_through_the_registry(daemon: Daemon) -> None:
    """plugin.listLoaded / isDisabled / reloadOne answer from the daemon's own registry (the ``plugins`` capability)."""
    install_probe(daemon, "process")
    await daemon.plugins.reload_all()
    await daemon.plugins.disable("timer")
    got = await offline_tool(daemon, "sdkprobe_plugins", {"ask": ["timer", "files"], "reload": "files"})
    assert "sdkprobe" in got["loaded"] and "files" in got["loaded"] and "timer" not in got["loaded"], got
    assert got["disabled"] == {"timer": True, "files": False}
    assert got["reloaded"]["state"] == "running", got
    assert daemon.plugins.info("files")["state"] == "running"


@pytest.mark.parametrize("runtime", ["process", "in-process"])
async def test_a_bad_document_is_refused_with_its_reason_and_stores_nothing(daemon: Daemon, runtime: str) -> None:
    install_probe(daemon, runtime)
    await daemon.plugins.reload_all()
    before = (await daemon.docs.astats())["documents"]
    errors = await offline_tool(daemon, "sdkprobe_bad", {})
    assert "unknown document field(s) contnt" in errors["typo"]
    assert "non-empty content" in errors["empty"]
    assert "'tags' must be a list of strings" in errors["tags"]
    assert (await daemon.docs.astats())["documents"] == before
