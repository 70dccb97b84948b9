"""Chinese labels and help texts of the settings, by key (the ConfigDefs carry the English ones).

The web UI asks for them with ``GET /api/v1/settings?lang=zh``; a key missing
here shows its English text, and tests/test_webui_setup.py checks that every
core and built-in plugin setting of a running daemon has its line.
"""

from __future__ import annotations

__all__ = ["SOURCE_FIELDS_ZH", "ZH"]

ZH: dict[str, tuple[str, str]] = {
    "core.agent.archive_interval": ("归档间隔", "多久把冷文档提炼进知识图谱一次（L2 到 L3）。"),
    "core.agent.child_timeout": ("子代理时限", "运行超过这么久的子代理会被取消。"),
    "core.agent.context_top_k": ("上下文保留数", "相关性裁剪在上下文中保留的事件数（最新 10 条加最相似的）。"),
    "core.agent.distill_interval": ("提炼间隔", "多久把上下文裁剪进文档库一次（L1 到 L2）。"),
    "core.agent.embedding_model_path": ("嵌入模型", "词向量 / model2vec 路径，逗号分隔；留空使用内置离线嵌入器。"),
    "core.agent.max_children": ("最多子代理", "同时运行的子代理（spawn_child）数量。"),
    "core.agent.max_context_size": ("上下文大小", "上下文窗口中保留的消息数（最新 10 条始终保留）。"),
    "core.agent.max_tool_turns": ("最多工具轮数", "一条消息允许的带工具调用的模型轮数。"),
    "core.agent.merge_interval": ("合并间隔", "多久合并一次重复实体。"),
    "core.agent.onnx_model_path": ("句法分析模型", "依存句法分析 ONNX 模型；留空则只用规则。"),
    "core.agent.persona_file": ("人设文件", "用其内容替换系统提示词中人设部分的文件；留空则不用。"),
    "core.agent.proactive_channels": ("主动回复发往", "输入不来自任何输出通道且未指定时（如插件设置的定时器）回复发往的输出通道"
                                      "（逗号分隔），发往其中存在的每一个。在对话中设置的定时器在该对话中回复。"),
    "core.agent.review_interval": ("复核间隔", "多久对照来源句子检查一次图谱关系。"),
    "core.agent.stage_timeout": ("阶段处理超时", "插件的一个阶段处理器最多可用的时间，超时即取消。"),
    "core.agent.language": ("语言", "HomeAgent 写给辅助模型的提示词（图片描述、文字识别、音频转写）所用的语言：en 或 zh。"
                            "回复跟随用户的语言。"),
    "core.agent.system_prompt": ("系统提示词", "人设文本；留空使用内置文本。"),
    "core.agent.tool_timeout": ("工具超时", "一次工具调用最多可用的时间，超时即取消。"),
    "core.agent.workdir": ("工作目录", "智能体运行命令时的工作目录；留空为数据目录。"),
    "core.approvals.ask": ("需批准的工具", "调用前需等待你批准的工具名或模式（fnmatch），逗号分隔。留空则都不询问。"),
    "core.approvals.deny": ("禁止的工具", "模型永远不能调用的工具名或模式，逗号分隔。"),
    "core.approvals.rules": ("参数规则", "{\"tool\", \"match\", \"action\"} 列表：工具的命令（cmd_run、终端）或路径（文件工具）"
                             "匹配 fnmatch 模式时允许、询问或拒绝；先匹配者生效，优先于你的“总是允许”规则和需批准列表。"),
    "core.memory.owner_name": ("你在记忆中的名字", "记忆对你（主人）的称呼：你的发言的说话人，也是你自己的事实所属的人（命令行、网页界面，以及用 "
                               "`homeagent identity link CHANNEL ID --owner` 关联的聊天账号）。留空为 'user'。旧名字下记住的事实保留旧名字。"),
    "core.sandbox.mode": ("沙箱", "cmd_run、终端和子进程插件如何被隔离。auto：bubblewrap 可用时在其中运行，否则不隔离并明确提示"
                          "（状态、网页界面）；bwrap：必须有 bubblewrap，否则什么都不启动；off：不隔离（较弱的模式）。启动时检查。"),
    "core.sandbox.network": ("命令可用网络", "允许沙箱中的命令和终端使用网络（关闭：只有私有的回环）。子进程插件在清单声明 net 能力时获得网络。"),
    "core.sandbox.bwrap": ("bubblewrap 程序", "bwrap 程序（在 PATH 中查找的名字或路径）。修改后会重新检查。"),
    "core.sandbox.ro_paths": ("额外只读目录", "除系统目录外沙箱以只读方式显示的目录（逗号分隔，如 /opt/tools）；即使在其中，数据目录也保持隐藏。"),
    "core.approvals.timeout": ("批准超时", "工具调用等待你回答的时间；无回答即拒绝。"),
    "core.daemon.check_interval": ("健康检查间隔", "多久检查一次 LLM 源和插件的健康状况。"),
    "core.daemon.data_dir": ("数据目录", "HomeAgent 存放数据库、记忆、插件和日志的位置（仅供查看：守护进程每次启动时写入；"
                             "用 --data-dir 或 HOMEAGENT_DATA_DIR 更改）。"),
    "core.daemon.heartbeat_interval": ("心跳间隔", "守护进程多久记录一次自己仍在运行。"),
    "core.daemon.log_level": ("日志级别", "写入日志的最低级别。"),
    "core.defaults.llm_endpoints": ("健康探测地址", "健康检查探测的 URL，逗号分隔；留空使用各源的接口地址。"),
    "core.defaults.openclaw_enabled": ("OpenClaw 技能", "接受 SKILL.md 中 OpenClaw/ClawHub 的技能元数据（条件与别名）。"),
    "core.input_processing.audio.describe_prompt": ("音频提示词", "把音频转成文字时使用的提示词；留空使用 core.agent.language 对应的内置提示词。"),
    "core.input_processing.audio.fallback_model": ("音频模型", "音频服务使用的模型。"),
    "core.input_processing.audio.fallback_provider": ("音频服务", "用于转写音频的源；留空则不转写。"),
    "core.input_processing.image.describe_prompt": ("图片描述提示词", "把图片转成文字描述时使用的提示词；留空使用 core.agent.language 对应的内置提示词。"),
    "core.input_processing.image.fallback_model": ("图片模型", "图片服务使用的模型。"),
    "core.input_processing.image.fallback_provider": ("图片服务", "当前模型看不到图片时用于描述图片的源；留空则不描述。"),
    "core.input_processing.image.ocr_enabled": ("图片文字识别", "同时提取图片中的文字。"),
    "core.input_processing.image.ocr_prompt": ("文字识别提示词", "读取图片中文字时使用的提示词；留空使用 core.agent.language 对应的内置提示词。"),
    "core.knowledge.path": ("知识库", "整理好的知识库所在文件夹。"),
    "core.llm.adapter": ("适配器", "默认源的 Lua 适配器；留空按接口地址选择。"),
    "core.llm.api_key": ("API 密钥", "默认源的密钥；留空使用环境变量（HOMEAGENT_LLM_API_KEY、LLM_API_KEY、DEEPSEEK_API_KEY）。"),
    "core.llm.base_url": ("接口地址", "默认源的 API 根地址。"),
    "core.llm.max_tokens": ("最大输出 token", "每次回复生成 token 数的上限。"),
    "core.llm.model": ("模型", "默认源的模型；留空使用源自身或适配器的默认模型。"),
    "core.llm.provider": ("首选源", "最先使用的源。留空为自动：环境变量、已配置的源（按优先级），最后是离线替身。"),
    "core.llm.temperature": ("温度", "采样温度。"),
    "core.llm.thinking_enabled": ("思考", "在支持的地方请模型给出思考过程。"),
    "core.log.backups": ("保留的轮转日志", "保留多少个轮转后的日志文件。"),
    "core.log.max_bytes": ("日志文件大小", "日志文件达到多少字节后轮转。"),
    "core.log.path": ("日志目录", "日志文件写入的位置。"),
    "core.memory.documents": ("文档", "文档库（L2）所在文件夹。"),
    "core.memory.graph": ("知识图谱", "长期记忆图谱（L3）的 SQLite 文件。"),
    "core.memory.media.cap": ("媒体库大小", "媒体库最多可占的字节数；超出时按最久未用淘汰无引用的媒体（描述保留）。0 表示不限。"),
    "core.memory.media.enabled": ("媒体记忆", "把智能体看到的图片和文件存入按内容寻址的媒体库（<data>/memory/media），"
                                  "记忆工具可按摘要引用；关闭时媒体只以文字保存。启动时读取。"),
    "core.memory.media.gc_interval": ("媒体回收间隔", "守护进程多久执行一次媒体回收（标记、清除、修复、限额）。"),
    "core.memory.media.gc_min_age": ("媒体回收宽限", "媒体在被回收发现无引用后，需再保持无引用多久，下次回收才淘汰其内容。"),
    "core.memory.media.max_bytes": ("单个媒体上限", "单个图片或文件的最大字节数；更大的在读取前即被拒绝。"),
    "core.memory.session_gap": ("对话间隔", "静默多久后，下一条消息在文档记忆中开始新的对话会话（同一会话内的轮次会一起被回忆）。"),
    "core.memory.text": ("文本日志", "原始对话文本日志所在文件夹。"),
    "core.plugin.dir": ("插件目录", "已安装的插件。相对路径（以下所有路径同样）位于数据目录下。"),
    "core.plugin.limits": ("单插件限制", "按插件名覆盖限制，例如 {\"indexer\": {\"max_memory_mb\": 4096, \"max_cpu_seconds\": 0}}。"),
    "core.plugin.log_rate": ("插件日志速率", "子进程插件每秒可发送的日志行数（突发可达四倍）；超出的被丢弃、计数并汇总为一行。"),
    "core.plugin.max_cpu_seconds": ("插件 CPU 时间上限", "子进程插件在其生命周期内可用的 CPU 秒数（RLIMIT_CPU），超出即停止并重启。"
                                   "0 表示不限。下次启动生效。"),
    "core.plugin.max_memory_mb": ("插件内存上限", "每个子进程插件可用的内存（堆与私有映射的 MB，RLIMIT_DATA）；超出的分配失败，"
                                  "插件会重启。0 表示不限。下次启动生效。"),
    "core.socket.max_inflight_rpcs": ("套接字并发请求", "一个本地套接字连接可同时未答复的 RPC 数；超出的立即以忙碌错误答复。"),
    "core.socket.max_queued_turns": ("套接字排队轮次", "一个本地套接字连接可排队或运行的对话轮次；超出的以忙碌错误拒绝。"),
    "core.socket.max_unread_bytes": ("套接字未读输出", "本地套接字客户端可留下未读的回复字节数，超出即断开并报错；达到八分之一时"
                                     "守护进程暂停读取其帧。"),
    "plugin.agentcli.default_timeout": ("空闲超时", "智能体这么久没用的终端会被关闭。"),
    "plugin.agentcli.max_terminals": ("最多打开终端", "可同时打开的终端数。"),
    "plugin.agentcli.notify_bytes": ("按字节通知", "新输出达到这么多字节时立即通知智能体。"),
    "plugin.agentcli.notify_interval": ("通知间隔", "否则每个终端最多每隔这么久通知一次新输出。"),
    "plugin.cfgmgr.protected_keys": ("智能体不可改的其他设置", "config_set 额外拒绝的设置键或模式（fnmatch，如 plugin.cmd.*），"
                                     "逗号分隔；仅限主人的设置始终拒绝。"),
    "plugin.cmd.allow_list": ("允许的程序", "程序名，逗号分隔。设置后只运行这些程序（按名称在 PATH 中查找），并忽略禁止列表。"),
    "plugin.cmd.allow_shell": ("允许 shell", "允许模型传入 shell: true，用 /bin/sh -c 运行命令（管道、重定向）。此时程序列表只看到 'sh'。"),
    "plugin.cmd.default_timeout": ("默认超时", "模型未给出超时时命令可运行的时间。"),
    "plugin.cmd.deny_list": ("禁止的程序", "永不运行的程序名，逗号分隔。这不是沙箱：env、sh、python 等可以运行任何东西；要限制请用允许列表。"),
    "plugin.cmd.max_output_bytes": ("输出上限", "stdout 和 stderr 各截断到这么多字节（保留开头和结尾）。"),
    "plugin.cmd.max_timeout": ("最长超时", "模型可请求的最长超时（core.agent.tool_timeout 也限制每次工具调用）。"),
    "plugin.files.dir": ("文件夹", "文件工具唯一可访问的文件夹（绝对路径）。留空为插件自己的数据文件夹。设为 / 会让模型访问你的整个文件系统。"),
    "plugin.files.max_file_bytes": ("最大文件", "大于此字节数的文件不读取、不编辑、不写入。"),
    "plugin.files.read_only": ("只读", "拒绝所有写入和编辑。"),
    "plugin.healthcheck.probe_interval": ("事件循环延迟采样间隔", "多久采样一次事件循环延迟。"),
    "plugin.healthcheck.selftest_timeout": ("自检超时", "healthcheck_selftest 最多可用的时间。"),
    "plugin.mcp.call_timeout": ("工具调用超时", "一次 MCP 工具调用允许的时间。"),
    "plugin.mcp.connect_timeout": ("连接超时", "启动服务器并列出工具允许的时间。"),
    "plugin.mcp.max_backoff": ("最长重连等待", "重连等待从 1 秒起翻倍，最多到此值。"),
    "plugin.mcp.ping_interval": ("探测间隔", "多久探测一次已连接的服务器。"),
    "plugin.mcp.servers": ("MCP 服务器", "JSON 列表：[{\"name\": \"fs\", \"command\": \"npx\", \"args\": [...], \"env\": {}}, "
                           "{\"name\": \"web\", \"url\": \"http://host/mcp\"}]，或原样粘贴 Claude Desktop 的 "
                           "{\"mcpServers\": {\"fs\": {\"command\": ...}}}。"),
    "plugin.skills.prompt_budget": ("技能提示词预算", "技能列表在系统提示词中最多占用的字符数。"),
    "plugin.timer.max_duration": ("最长一次性定时", "一次性定时器（时长或时刻）最远可设多久之后。"),
    "plugin.timer.max_timers": ("最多活动定时器", "同时活动的定时器数量上限。"),
    "plugin.timer.min_interval": ("最短重复间隔", "智能体设置的重复（cron）定时器两次运行之间的最短间隔；0 表示不限。"),
    "plugin.timer.timezone": ("时区", "cron 表达式和不带时差的时间所用的 IANA 时区（留空为本机时区）。"),
    "webui.allow_remote": ("允许远程访问", "允许 webui.listen_addr 绑定到非回环地址。"),
    "webui.allowed_hosts": ("允许的主机名", "除 127.0.0.1、localhost、[::1] 和监听地址外，网页界面在 Host 头中还接受的名称"
                            "（name 或 name:port），逗号分隔；其他返回 421（防 DNS 重绑定）。监听非回环地址时设置后才检查；* 关闭检查。"),
    "webui.listen_addr": ("监听地址", "网页界面和 HTTP API 的 host:port。非回环主机还需要 webui.allow_remote。"),
    "plugin.webui.session_ttl_hours": ("登录有效期", "浏览器登录保持有效的小时数。"),
    "plugin.webui.max_upload_mb": ("上传大小上限", "对话上传接受的最大文件（MB）。"),
    "plugin.webui.max_concurrent_turns": ("每个客户端的轮次", "一个浏览器会话（或 API 令牌）可同时排队或运行的对话轮次；超出返回 429。"),
    "plugin.webui.chat_timeout": ("对话超时", "同步对话请求等待本轮结果的时间。"),
    # the shipped qq plugin (its settings exist once it is enabled)
    "plugin.qq.images_to_model": ("图片交给模型", "QQ 消息中的图片会被获取（每条最多 4 张，每张不超过 core.memory.media.max_bytes），"
                                  "随消息交给模型并存入媒体库。public：只从公网地址获取（QQ 图片服务器）；any：也从回环和局域网地址获取"
                                  "（自己提供图片的实现）；off：模型只得到 [图片 URL] 标记。"),
    "plugin.qq.reply_style": ("回复方式", "whole：一条回复是一条消息，只有超过最长消息长度时才拆分；paragraphs：回复的每个段落"
                              "（空行分隔；代码块保持完整）各发一条消息，像人在聊天中那样。"),
    "plugin.qq.mode": ("连接方式", "forward：插件连接 OneBot 实现的 WebSocket 服务器（ws_url）；reverse：实现连接插件"
                       "（reverse_host:reverse_port）；http：通过 HTTP API（http_api_url）执行动作，事件 POST 到 "
                       "reverse_host:reverse_port。"),
    "plugin.qq.ws_url": ("WebSocket 地址", "正向模式：实现的 WebSocket 服务器（NapCat 默认端口 3001）。"),
    "plugin.qq.access_token": ("访问令牌", "OneBot 实现中配置的访问令牌（以 Bearer 头发送；设置后反向客户端也必须提供）。"),
    "plugin.qq.reverse_host": ("反向/HTTP：监听地址", "反向和 http 模式的监听位置。非回环地址需要访问令牌（反向）或密钥（http）。"),
    "plugin.qq.reverse_port": ("反向/HTTP：端口", "反向和 http 模式监听的端口。"),
    "plugin.qq.http_api_url": ("HTTP API 地址", "http 模式：实现的 HTTP API（NapCat 默认端口 3000）。"),
    "plugin.qq.http_secret": ("HTTP POST 密钥", "http 模式：实现为事件 POST 签名所用的密钥（X-Signature）。"),
    "plugin.qq.allowed_users": ("允许的用户", "其私聊消息会交给智能体的 QQ 号（逗号分隔）；* 表示所有人。留空则忽略私聊。"),
    "plugin.qq.allowed_groups": ("允许的群", "机器人监听的群号（逗号分隔）；* 表示所有群。留空则忽略群消息。"),
    "plugin.qq.group_keywords": ("群关键词", "除 @ 机器人外，包含其中任一关键词（逗号分隔，如 '/ask, 小助手'）的群消息也会回复。"),
    "plugin.qq.remember_unaddressed": ("记住未@的群消息", "未提到机器人的群消息不回复；开启后仍存入文档记忆。"),
    "plugin.qq.max_message_chars": ("最长消息", "超过此长度的回复分成多条发送（QQ 会截断很长的消息）。"),
    "plugin.qq.max_parts": ("每次回复最多条数", "一次回复最多发送这么多条，其余丢弃并附说明。"),
    "plugin.qq.rate_per_minute": ("每个会话每分钟消息数", "发往同一群或用户的消息按此速率发送（突发 5 条）。"),
    "plugin.qq.queue_size": ("入站队列", "等待交给智能体的消息数；超出的新消息被丢弃并计数。"),
    "plugin.qq.reconnect_max": ("最长重连间隔（秒）", "正向模式：重连从 1 秒开始退避，最多到此值。"),
}

SOURCE_FIELDS_ZH: dict[str, tuple[str, str]] = {
    "base_url": ("接口地址", "服务商的 API 根地址，例如 https://api.example.com/v1。"),
    "model": ("模型", "发送给服务商的模型名。"),
    "api_key": ("API 密钥", "服务商的密钥；保存在本机，显示时隐藏。"),
    "adapter": ("适配器", "说该服务商协议的 Lua 适配器（如 openai、deepseek、anthropic）。"),
    "adapter_path": ("适配器文件", "自定义 .lua 适配器的路径；相对路径位于数据目录下。"),
    "max_concurrent": ("最大并发请求", "同时发往此源的请求数。"),
    "priority": ("优先级", "回退顺序：数值大的先尝试。"),
    "context_window": ("上下文窗口", "模型接受的 token 数；0 表示未知。"),
    "thinking_enabled": ("思考", "在服务商支持时请模型给出思考过程。"),
    "vision": ("视觉", "模型能看图：附加的图片以图片形式发给它。关闭时由 core.input_processing.image.fallback_provider "
                       "描述图片，或只以其标记文字发送。"),
}
