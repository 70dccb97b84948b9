"""Plugin host benchmarks: load times, the skills prompt block, and Lua tool-call overhead.

    .venv/bin/python bench/bench_plugins.py [--lua 50] [--skills 200] [--calls 400]

Baselines come from the same run: loading N in-process Python plugins (vs N
Lua plugins), and calling a built-in Python tool (vs the same tool in Lua).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from homeagent.agent.prompt import PromptBuilder
from homeagent.agent.stages import StageHost
from homeagent.agent.tools import ToolRegistry
from homeagent.config import ConfigRegistry
from homeagent.events import EventBus
from homeagent.io.channels import OutputChannels
from homeagent.io.manager import IOManager
from homeagent.plugins.registry import PluginRegistry
from homeagent.plugins.services import PluginServices
from homeagent.sdk.types import ToolCall, ToolDef

LUA_MAIN = """
sdk.register_tool("{name}_echo", {{
  description = "Echo a text.",
  parameters = {{ type = "object", properties = {{ text = {{ type = "string" }} }}, required = {{ "text" }} }},
}}, function(args) return {{ echo = args.text }} end)
sdk.register_tool("{name}_count", {{ description = "Count calls." }}, function() return 1 end)
sdk.register_stage("on_input", function(ctx) end)
"""

PY_MAIN = """
class P:
    def __init__(self, name):
        self.name = name
    def start(self, sdk):
        async def echo(args):
            return {{"echo": args["text"]}}
        sdk.register_tool("{name}_echo", echo, description="Echo a text.",
                          parameters={{"type": "object", "properties": {{"text": {{"type": "string"}}}}, "required": ["text"]}})
        sdk.register_tool("{name}_count", lambda args: 1, description="Count calls.")
        sdk.register_stage("on_input", lambda ctx: None)
    def stop(self):
        pass
def create_plugin(name, config):
    return P(name)
"""


def services(data_dir: Path) -> PluginServices:
    tools = ToolRegistry()
    return PluginServices(
        tools=tools,
        stages=StageHost(),
        io=IOManager(),
        config=ConfigRegistry(data_dir / "config.db"),
        events=EventBus(),
        channels=OutputChannels(tools),
        prompt=PromptBuilder(identity=lambda: "bench"),
        llm=None,
        data_dir=data_dir,
    )


def write(folder: Path, manifest: dict[str, Any], files: dict[str, str]) -> None:
    folder.mkdir(parents=True)
    (folder / "plugin.json").write_text(json.dumps(manifest))
    for name, text in files.items():
        (folder / name).write_text(text)


async def timed_load(root: Path, populate: Any) -> tuple[float, PluginRegistry, PluginServices]:
    svc = services(root)
    plugins = root / "plugins"
    populate(plugins)
    registry = PluginRegistry(svc, plugins, builtins={}, entry_points=False)
    started = time.perf_counter()
    summary = await registry.load_all()
    elapsed = time.perf_counter() - started
    assert not summary["failed"], summary["failed"]
    return elapsed, registry, svc


async def call_stats(tools: ToolRegistry, name: str, n: int) -> list[float]:
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        result = await tools.execute(ToolCall(str(i), name, {"text": "hello"}))
        times.append((time.perf_counter() - t0) * 1000)
        assert result.status == "ok", result
    return times


def row(label: str, value: str, baseline: str = "", ratio: str = "") -> str:
    return f"| {label:<44} | {value:>14} | {baseline:>14} | {ratio:>8} |"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lua", type=int, default=50)
    parser.add_argument("--skills", type=int, default=200)
    parser.add_argument("--calls", type=int, default=400)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-plugins-"))
    lines = [
        row("measure", "value", "baseline", "ratio"),
        "|" + "-" * 46 + "|" + "-" * 16 + "|" + "-" * 16 + "|" + "-" * 10 + "|",
    ]
    try:

        def lua_plugins(plugins: Path) -> None:
            for i in range(args.lua):
                name = f"lua{i:03d}"
                write(
                    plugins / name,
                    {"name": name, "version": "1.0.0", "entry": "main.lua"},
                    {"main.lua": LUA_MAIN.format(name=name)},
                )

        def py_plugins(plugins: Path) -> None:
            for i in range(args.lua):
                name = f"py{i:03d}"
                write(
                    plugins / name,
                    {"name": name, "version": "1.0.0", "entry": "main.py"},
                    {"main.py": textwrap.dedent(PY_MAIN.format(name=name))},
                )

        def skills(plugins: Path) -> None:
            for i in range(args.skills):
                name = f"skill-{i:03d}"
                desc = f"Skill {i} handles a specialised kind of request; use it when the user asks for task {i}. " * 2
                (plugins / name).mkdir(parents=True)
                (plugins / name / "SKILL.md").write_text(
                    f"---\nname: {name}\ndescription: {desc.strip()}\nlicense: MIT\n"
                    f'metadata: {{"openclaw": {{"requires": {{"bins": ["sh"]}}}}}}\n---\n\n# {name}\n\nSteps.\n'
                )

        py_time, py_reg, py_svc = await timed_load(tmp / "py", py_plugins)
        lua_time, lua_reg, lua_svc = await timed_load(tmp / "lua", lua_plugins)
        lines.append(
            row(
                f"load {args.lua} Lua plugins (total ms)",
                f"{lua_time * 1000:.0f}",
                f"{py_time * 1000:.0f} (py)",
                f"{lua_time / py_time:.2f}x",
            )
        )
        lines.append(
            row(
                "  per Lua plugin (ms)",
                f"{lua_time * 1000 / args.lua:.2f}",
                f"{py_time * 1000 / args.lua:.2f} (py)",
                "",
            )
        )

        sk_time, sk_reg, sk_svc = await timed_load(tmp / "skills", skills)
        lines.append(row(f"load {args.skills} skills (total ms)", f"{sk_time * 1000:.0f}", "", ""))
        lines.append(row("  per skill (ms)", f"{sk_time * 1000 / args.skills:.2f}", "", ""))
        block = sk_reg.skills.prompt_block()
        sk_svc.config.set_plugin("skills", "prompt_budget", 200_000)
        unbounded = sk_reg.skills.prompt_block()
        lines.append(
            row(
                f"skills block chars at {args.skills} skills",
                f"{len(block)}",
                f"{len(unbounded)} (no cap)",
                f"{len(block) / len(unbounded):.2f}x",
            )
        )
        lines.append(row("  skills listed within the budget", f"{block.count(chr(10) + '- ')}", f"{args.skills}", ""))

        # over budget: the skills closest to the message (BM25) against the cached by-name list
        sk_svc.config.set_plugin("skills", "prompt_budget", 3000)
        catalog = sk_reg.skills
        catalog.prompt_block()
        started = time.perf_counter()
        for _ in range(200):
            catalog.prompt_block()
        by_name_us = (time.perf_counter() - started) / 200 * 1e6
        catalog.relevant_block("please help with task 17")  # builds the index once per change of the skills
        started = time.perf_counter()
        for i in range(200):
            ranked = catalog.relevant_block(f"please help with task {i % args.skills}")
        ranked_us = (time.perf_counter() - started) / 200 * 1e6
        lines.append(
            row(
                f"skills block over budget, by relevance (us/turn, {args.skills} skills)",
                f"{ranked_us:.0f}",
                f"{by_name_us:.1f} (by name, cached)",
                f"{ranked_us / max(by_name_us, 1e-9):.0f}x",
            )
        )
        first = next(line for line in ranked.splitlines() if line.startswith("- "))
        listed = ranked.count("\n- ")
        lines.append(row("  the asked-for skill listed first", str(first.startswith(f"- skill-{(args.skills - 1):03d}:")),
                         f"{listed} of {args.skills} listed", ""))

        async def builtin_echo(a: dict[str, Any]) -> Any:
            return {"echo": a["text"]}

        lua_svc.tools.register(
            ToolDef(
                name="builtin_echo",
                description="echo",
                parameters={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            ),
            builtin_echo,
        )
        await call_stats(lua_svc.tools, "lua000_echo", 20)  # warm up
        await call_stats(lua_svc.tools, "builtin_echo", 20)
        lua_calls = await call_stats(lua_svc.tools, "lua000_echo", args.calls)
        py_calls = await call_stats(lua_svc.tools, "builtin_echo", args.calls)
        lm, pm = statistics.median(lua_calls), statistics.median(py_calls)
        lines.append(row("tool call, median ms (Lua vs built-in Python)", f"{lm:.3f}", f"{pm:.3f}", f"{lm / pm:.1f}x"))
        l95 = statistics.quantiles(lua_calls, n=20)[-1]
        p95 = statistics.quantiles(py_calls, n=20)[-1]
        lines.append(row("tool call, p95 ms", f"{l95:.3f}", f"{p95:.3f}", f"{l95 / p95:.1f}x"))
        lines.append(row("Lua overhead per call, median ms", f"{lm - pm:.3f}", "", ""))

        for reg, svc in ((py_reg, py_svc), (lua_reg, lua_svc), (sk_reg, sk_svc)):
            await reg.stop_all()
            await svc.events.close()
            svc.config.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n".join(lines))


if __name__ == "__main__":
    asyncio.run(main())
