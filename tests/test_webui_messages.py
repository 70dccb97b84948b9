"""Web UI errors in the page's language: every message template has a Chinese entry, and real errors come
back in Chinese when the page asks for it (``X-HomeAgent-Lang``, else ``Accept-Language``) and in the same
English as always without it."""

from __future__ import annotations

import ast
import pickle
import string
from pathlib import Path

from homeagent.msg import Joined, Msg, localize, message_of
from homeagent.webui.lang import accept_language, request_lang
from homeagent.webui.messages_zh import ZH_MESSAGES
from tests.fakes.webui_fixtures import Web

SRC = Path(__file__).resolve().parent.parent / "src" / "homeagent"
ZH = {"X-HomeAgent-Lang": "zh"}


# ---------------------------------------------------------------- the catalog against the source


def _templates() -> dict[str, str]:
    """Every ``Msg("...")`` template in the source, with where it is first used."""
    found: dict[str, str] = {}
    computed: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "msg.py" and path.parent == SRC:
            continue  # the type itself (its _rebuild passes a template through)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name != "Msg":
                continue
            where = f"{path.relative_to(SRC)}:{node.lineno}"
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.setdefault(first.value, where)
            else:
                computed.append(where)
    assert not computed, f"Msg templates must be string literals (the catalog is checked against them): {computed}"
    return found


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


def test_every_template_has_a_chinese_entry_with_the_same_placeholders() -> None:
    templates = _templates()
    assert len(templates) > 150  # the walk found the messages (a broken walk would pass vacuously)
    missing = {t: where for t, where in templates.items() if t not in ZH_MESSAGES}
    assert not missing, f"templates without a Chinese entry in webui/messages_zh.py: {missing}"
    differ = {t: (sorted(_fields(t)), sorted(_fields(ZH_MESSAGES[t]))) for t in templates
              if _fields(t) != _fields(ZH_MESSAGES[t])}
    assert not differ, f"placeholders differ between English and Chinese: {differ}"
    unused = sorted(set(ZH_MESSAGES) - set(templates))
    assert not unused, f"Chinese entries no Msg uses (a template was reworded?): {unused}"


def test_every_entry_renders() -> None:
    """Braces are balanced and format specs (``:g``, ``:.1f``) take a number, in both languages."""
    for english, chinese in ZH_MESSAGES.items():
        msg = Msg(english, **dict.fromkeys(_fields(english), 1.5))
        rendered = localize(msg, ZH_MESSAGES)
        assert rendered != msg, english
        assert (rendered.count("{"), rendered.count("}")) == (msg.count("{"), msg.count("}")), chinese


# ---------------------------------------------------------------- the message type


def test_a_msg_is_its_english_text_everywhere() -> None:
    msg = Msg("field {name!r} is too long (limit {limit} characters)", name="x", limit=10)
    assert msg == "field 'x' is too long (limit 10 characters)"
    assert str(ValueError(msg)) == msg and f"{msg}" == msg and type(str(msg)) is str
    assert message_of(ValueError(msg)) is msg
    assert message_of(KeyError("k")) == "'k'"  # other exceptions: their str()
    copy = pickle.loads(pickle.dumps(ValueError(msg)))
    assert message_of(copy).template == msg.template  # type: ignore[attr-defined]
    literal = Msg('send {{"names": [source, ...]}} in the order to try them')
    assert literal == 'send {"names": [source, ...]} in the order to try them'


def test_localize_translates_frames_parameters_lists_and_dicts() -> None:
    inner = Msg("{shown} is not a whole number", shown="'abc'")
    outer = Msg("{key}: {message}", key="core.agent.max_tool_turns", message=inner)
    assert outer == "core.agent.max_tool_turns: 'abc' is not a whole number"
    assert localize(outer, ZH_MESSAGES) == "core.agent.max_tool_turns：'abc' 不是整数"
    free = Msg("cannot install: {reason}", reason="[Errno 28] No space left on device")  # a library's text
    assert localize(free, ZH_MESSAGES) == "无法安装：[Errno 28] No space left on device"
    joined = Joined("; ", [Msg("field {key!r} is missing", key="name"), "something else"])
    assert joined == "field 'name' is missing; something else"
    assert localize({"errors": {"a": joined}, "n": 1}, ZH_MESSAGES) == {
        "errors": {"a": "缺少字段 'name'; something else"}, "n": 1}
    assert localize(outer, None) is outer
    unknown = Msg("a template with no entry {x}", x=Msg("the value"))
    assert localize(unknown, ZH_MESSAGES) == "a template with no entry the value"  # never half translated


def test_the_language_of_a_request() -> None:
    assert request_lang({}) == "en"
    assert request_lang({"x-homeagent-lang": "zh"}) == "zh"
    assert request_lang({"x-homeagent-lang": "en", "accept-language": "zh-CN,zh;q=0.9"}) == "en"  # the page's choice
    assert request_lang({"accept-language": "zh-CN,zh;q=0.9,en;q=0.8"}) == "zh"
    assert request_lang({"accept-language": "en-US,en;q=0.9,zh-CN;q=0.8"}) == "en"
    assert request_lang({"accept-language": "fr"}) == "en"  # no catalog: English
    assert request_lang({"x-homeagent-lang": "zh_TW"}) == "zh"
    assert accept_language("de;q=0.5, zh-Hans;q=0.9, *;q=1") == "zh"
    assert accept_language("en;q=nonsense, zh") == "zh"
    assert accept_language("") == ""


# ---------------------------------------------------------------- real errors over HTTP


async def test_real_errors_come_back_in_chinese_when_asked_and_in_english_without(web: Web) -> None:
    async with web.client() as en, web.client(headers=ZH) as zh:
        # a bad value and an unknown setting: all or nothing, one message per field
        body = {"core.agent.max_tool_turns": "abc", "core.agent.max_tool_turnz": 3}
        english = (await en.put("/api/v1/settings", json=body)).json()
        assert english["error"] == "nothing was saved: some settings are invalid"
        assert english["errors"] == {"core.agent.max_tool_turns": "'abc' is not a whole number",
                                     "core.agent.max_tool_turnz": 'unknown setting; did you mean '
                                                                  '"core.agent.max_tool_turns"?'}
        answer = await zh.put("/api/v1/settings", json=body)
        assert answer.status_code == 400
        chinese = answer.json()
        assert chinese["error"] == "未保存任何内容：部分设置无效"
        assert chinese["errors"] == {"core.agent.max_tool_turns": "'abc' 不是整数",
                                     "core.agent.max_tool_turnz": '未知设置；你是不是想用 "core.agent.max_tool_turns"？'}
        assert web.daemon.config.get("core.agent.max_tool_turns") != "abc"  # nothing was written
        too_big = (await zh.put("/api/v1/settings", json={"core.agent.max_tool_turns": 10**9})).json()
        assert "高于最大值" in too_big["errors"]["core.agent.max_tool_turns"]

        # an owner-only setting the web UI may not change: the API token's hash
        refused = {"plugin.webui.token_hash": "x"}
        assert (await en.put("/api/v1/settings", json=refused)).json()["errors"] == {
            "plugin.webui.token_hash": "read-only here: the API token is changed with `homeagent webui token`"}
        assert (await zh.put("/api/v1/settings", json=refused)).json()["errors"] == {
            "plugin.webui.token_hash": "此处只读：API 令牌请用 `homeagent webui token` 更换"}

        # a plugin that is not there
        assert (await en.get("/api/v1/plugins/nosuchplugin")).json()["error"] == "no plugin named 'nosuchplugin'"
        missing = await zh.post("/api/v1/plugins/nosuchplugin/enable")
        assert missing.status_code == 404 and missing.json()["error"] == "没有名为 'nosuchplugin' 的插件"
        assert missing.json()["plugin"] == "nosuchplugin"

        # a wrong LLM source form (a subsystem's check) and a wrong field (the route's own check)
        form = {"name": "my source!", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
        assert (await en.post("/api/v1/llm/sources", json=form)).json()["error"] == (
            "a source name is 1-40 letters, digits, '-' or '_', starting with a letter or digit")
        assert (await zh.post("/api/v1/llm/sources", json=form)).json()["error"] == (
            "源名称须为 1-40 个字母、数字、'-' 或 '_'，并以字母或数字开头")
        bad_url = {"name": "mine", "base_url": "ftp://x", "model": "m"}
        assert (await zh.post("/api/v1/llm/sources", json=bad_url)).json()["error"] == (
            "base_url 'ftp://x' 必须以 http:// 或 https:// 开头并包含主机名")
        wrong_type = (await zh.post("/api/v1/llm/sources", json={"name": "mine", "model": 5.5})).json()
        assert wrong_type == {"error": "model：需要文本", "field": "model"}
        assert "mine" not in web.daemon.config.sources()

        # a malformed body, in the shared helpers every route uses
        assert (await zh.post("/api/v1/llm/use", content=b"{")).json()["error"].startswith("JSON 格式错误：")

    # Accept-Language decides when the page sends no choice; the page's choice wins over it
    async with web.client(headers={"Accept-Language": "zh-CN,zh;q=0.9"}) as browser:
        assert (await browser.get("/api/v1/plugins/nosuchplugin")).json()["error"] == "没有名为 'nosuchplugin' 的插件"
        picked = await browser.get("/api/v1/plugins/nosuchplugin", headers={"X-HomeAgent-Lang": "en"})
        assert picked.json()["error"] == "no plugin named 'nosuchplugin'"
    # refusals made before a route runs: no sign-in
    async with web.client(auth=False, headers=ZH) as anon:
        assert (await anon.get("/api/v1/status")).json()["error"].startswith("需要登录")


async def test_an_upload_too_large_is_refused_in_chinese(web: Web) -> None:
    web.daemon.config.set("plugin.webui.max_upload_mb", 1)
    package = b"\0" * (3 * 1024 * 1024)
    async with web.client() as en, web.client(headers=ZH) as zh:
        english = await en.post("/api/v1/plugins", files={"file": ("big.hmap", package)})
        assert english.status_code == 413 and english.json()["error"] == "package too large (limit 1 MB)"
        chinese = await zh.post("/api/v1/plugins", files={"file": ("big.hmap", package)})
        assert chinese.status_code == 413 and chinese.json()["error"] == "插件包过大（上限 1 MB）"
        # a package that is not one: the installer's reason inside the route's frame, both translated
        broken = await zh.post("/api/v1/plugins", files={"file": ("broken.hmap", b"not a zip")})
        assert broken.status_code == 400
        assert broken.json()["error"] == "无法安装：broken.hmap 不是 zip 压缩包（.hmap 插件包是 zip 文件）"
    assert not any(p.name.startswith("broken") for p in web.daemon.paths.plugins.iterdir())


async def test_chat_and_conversation_errors_follow_the_language(web: Web) -> None:
    async with web.client() as en, web.client(headers=ZH) as zh:
        english = await en.get("/api/v1/conversations/987654")
        assert english.status_code == 404 and english.json()["error"].startswith("no conversation 987654 (deleted")
        chinese = await zh.get("/api/v1/conversations/987654")
        assert chinese.status_code == 404 and chinese.json()["error"].startswith("没有对话 987654")
        made = (await zh.post("/api/v1/conversations", json={"title": "x"})).json()
        long_title = await zh.patch(f"/api/v1/conversations/{made['id']}", json={"title": "t" * 300})
        assert long_title.status_code == 400 and long_title.json()["error"] == "标题最多 200 个字符（当前为 300 个）"
        nothing = await zh.post(f"/api/v1/conversations/{made['id']}/regenerate", json={})
        assert nothing.status_code == 409 and nothing.json()["error"].startswith("无可重新生成的内容")
        upload = await zh.post("/api/v1/chat/file", json={"a": 1})
        assert upload.status_code == 415 and upload.json()["error"].startswith("请以 multipart/form-data 发送文件")


async def test_the_mcp_pages_server_problems_follow_the_language(web: Web) -> None:
    """An imported block the mcp plugin cannot use: the MCP page lists why, in the page's language."""
    async with web.client() as en, web.client(headers=ZH) as zh:
        block = '{"mcpServers": {"both": {"command": "x", "url": "http://127.0.0.1:9/mcp"}}}'
        saved = await en.put("/api/v1/settings", json={"plugin.mcp.servers": block})
        assert saved.status_code == 200, saved.text
        assert (await en.post("/api/v1/plugins/mcp/reload")).status_code == 200
        english = (await en.get("/api/v1/plugins/mcp")).json()["health"]["problems"]
        assert english == ["server 'both': give exactly one of command (stdio) or url (HTTP)"]
        chinese = (await zh.get("/api/v1/plugins/mcp")).json()["health"]["problems"]
        assert chinese == ["服务器 'both'：command（stdio）和 url（HTTP）必须且只能给出一个"]
