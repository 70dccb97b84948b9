// English and Chinese labels. Elements with data-i18n="key" get their text from here;
// data-i18n-placeholder / data-i18n-title set those attributes.
const STRINGS = {
  en: {
    "app.title": "HomeAgent",
    "nav.chat": "Chat", "nav.overview": "Overview", "nav.settings": "Settings", "nav.plugins": "Plugins",
    "nav.memory": "Memory", "nav.knowledge": "Knowledge", "nav.adapters": "Adapters", "nav.approvals": "Approvals",
    "approvals.waiting": "waiting for you", "approvals.once": "Allow once", "approvals.always": "Always for {pattern}",
    "approvals.deny": "Deny", "approvals.child": "sub-agent {id}", "approvals.owner": "you", "approvals.pending": "Waiting",
    "approvals.rules": "Always rules", "approvals.log": "Decisions", "approvals.tool": "Tool", "approvals.pattern": "Pattern",
    "approvals.by": "Granted", "approvals.remove": "Remove", "approvals.removed": "Rule #{id} removed.",
    "approvals.no_rules": "No always rules.", "approvals.no_log": "No decisions yet.", "approvals.when": "When",
    "approvals.decision": "Decision", "approvals.subject": "Command / path", "approvals.who": "Asked by",
    "ui.theme": "Theme", "ui.dark": "Dark", "ui.light": "Light", "ui.language": "中文", "ui.logout": "Sign out",
    "login.title": "Sign in to HomeAgent", "login.token": "API token", "login.submit": "Sign in",
    "login.hint": "The token was printed when the daemon first started. Lost it? Run `homeagent webui token`.",
    "login.wrong": "Wrong token.", "login.limited": "Too many attempts. Try again in {s} s.",
    "chat.placeholder": "Message HomeAgent…  (Enter to send, Shift+Enter for a new line)",
    "chat.send": "Send", "chat.stop": "Stop", "chat.interrupt": "Interrupt", "chat.attach": "Attach",
    "chat.reasoning": "Reasoning", "chat.tool": "Tool", "chat.retrying": "Interrupted — the model is answering again",
    "chat.stopped": "Stopped.", "chat.proactive": "sent to this page", "chat.empty": "No messages yet. Say hello!",
    "chat.attached": "Attached: {names}", "chat.uploading": "Uploading…", "chat.you": "You", "chat.agent": "HomeAgent",
    "chat.busy_hint": "A reply is streaming: your text will interrupt it.", "chat.error": "Error",
    "overview.status": "Status", "overview.sources": "LLM sources", "overview.events": "Live events",
    "overview.use": "Use", "overview.current": "current", "overview.uptime": "Uptime", "overview.version": "Version",
    "overview.llm": "LLM", "overview.agent": "Agent", "overview.tools": "Tools", "overview.busy": "busy",
    "overview.idle": "idle", "overview.turns": "turns", "overview.sandbox": "Sandbox",
    "settings.save": "Save changes", "settings.saved": "Saved {n} setting(s).", "settings.nochange": "Nothing changed.",
    "settings.invalid": "Some settings are invalid; nothing was saved.", "settings.secret_hint": "unchanged (stored)",
    "settings.default": "default", "settings.filter": "Filter settings…",
    "cat.llm": "LLM", "cat.agent": "Agent", "cat.memory": "Memory", "cat.input": "Input processing",
    "cat.webui": "Web UI", "cat.daemon": "Daemon", "cat.paths": "Paths", "cat.other": "Other",
    "plugins.install": "Install .hmap", "plugins.enable": "Enable", "plugins.disable": "Disable",
    "plugins.reload": "Reload", "plugins.remove": "Remove", "plugins.none": "No plugins installed.",
    "plugins.confirm_remove": "Remove plugin {name}?", "plugins.name": "Name", "plugins.state": "State",
    "plugins.health": "Health", "plugins.version": "Version", "plugins.kind": "Kind",
    "memory.timeline": "Context timeline", "memory.documents": "Documents", "memory.graph": "Graph",
    "memory.stats": "Stats", "memory.search": "Search memory…", "memory.depth": "Depth",
    "memory.no_graph_lib": "Graph library not installed (npm install): showing a list.",
    "memory.empty": "Nothing here yet.", "memory.media": "Media",
    "memory.media_summary": "{n} stored, {size}; {refs} references",
    "memory.media_refs": "{n} references", "memory.media_gone": "bytes {state}; the description is kept",
    "knowledge.new": "New entry", "knowledge.name": "Name", "knowledge.content": "Content (Markdown)",
    "knowledge.save": "Save", "knowledge.delete": "Delete", "knowledge.search": "Search knowledge…",
    "knowledge.confirm_delete": "Delete knowledge entry {name}?", "knowledge.preview": "Preview",
    "adapters.builtin": "built-in", "adapters.user": "yours", "adapters.save": "Save", "adapters.save_as": "Save as my own",
    "adapters.delete": "Delete", "adapters.new": "New adapter", "adapters.ok": "Saved; the adapter loads fine.",
    "adapters.confirm_delete": "Delete your adapter {name}?",
    "common.unavailable": "This daemon does not have this yet ({msg}).", "common.loading": "Loading…",
    "common.error": "Error: {msg}", "common.refresh": "Refresh", "common.search": "Search", "common.saved": "Saved.",
  },
  zh: {
    "app.title": "HomeAgent",
    "nav.chat": "对话", "nav.overview": "概览", "nav.settings": "设置", "nav.plugins": "插件",
    "nav.memory": "记忆", "nav.knowledge": "知识库", "nav.adapters": "适配器", "nav.approvals": "审批",
    "approvals.waiting": "等待你的批准", "approvals.once": "允许一次", "approvals.always": "总是允许 {pattern}",
    "approvals.deny": "拒绝", "approvals.child": "子代理 {id}", "approvals.owner": "你", "approvals.pending": "等待中",
    "approvals.rules": "总是允许的规则", "approvals.log": "决定记录", "approvals.tool": "工具", "approvals.pattern": "模式",
    "approvals.by": "授予", "approvals.remove": "删除", "approvals.removed": "规则 #{id} 已删除。",
    "approvals.no_rules": "没有总是允许的规则。", "approvals.no_log": "还没有决定。", "approvals.when": "时间",
    "approvals.decision": "决定", "approvals.subject": "命令 / 路径", "approvals.who": "请求者",
    "ui.theme": "主题", "ui.dark": "深色", "ui.light": "浅色", "ui.language": "English", "ui.logout": "退出登录",
    "login.title": "登录 HomeAgent", "login.token": "API 令牌", "login.submit": "登录",
    "login.hint": "令牌在守护进程首次启动时打印。丢失了？运行 `homeagent webui token`。",
    "login.wrong": "令牌错误。", "login.limited": "尝试次数过多，请 {s} 秒后再试。",
    "chat.placeholder": "给 HomeAgent 发消息…（回车发送，Shift+回车换行）",
    "chat.send": "发送", "chat.stop": "停止", "chat.interrupt": "打断", "chat.attach": "附件",
    "chat.reasoning": "思考过程", "chat.tool": "工具", "chat.retrying": "已打断 —— 模型正在重新回答",
    "chat.stopped": "已停止。", "chat.proactive": "发送到本页面", "chat.empty": "还没有消息，打个招呼吧！",
    "chat.attached": "已附加：{names}", "chat.uploading": "上传中…", "chat.you": "你", "chat.agent": "HomeAgent",
    "chat.busy_hint": "正在回复：你发送的内容将打断它。", "chat.error": "错误",
    "overview.status": "状态", "overview.sources": "LLM 源", "overview.events": "实时事件",
    "overview.use": "使用", "overview.current": "当前", "overview.uptime": "运行时间", "overview.version": "版本",
    "overview.llm": "LLM", "overview.agent": "智能体", "overview.tools": "工具", "overview.busy": "忙碌",
    "overview.idle": "空闲", "overview.turns": "轮", "overview.sandbox": "沙箱",
    "settings.save": "保存更改", "settings.saved": "已保存 {n} 项设置。", "settings.nochange": "没有更改。",
    "settings.invalid": "部分设置无效，未保存任何内容。", "settings.secret_hint": "未更改（已保存）",
    "settings.default": "默认", "settings.filter": "筛选设置…",
    "cat.llm": "大模型", "cat.agent": "智能体", "cat.memory": "记忆", "cat.input": "输入处理",
    "cat.webui": "网页界面", "cat.daemon": "守护进程", "cat.paths": "路径", "cat.other": "其他",
    "plugins.install": "安装 .hmap", "plugins.enable": "启用", "plugins.disable": "停用",
    "plugins.reload": "重载", "plugins.remove": "删除", "plugins.none": "尚未安装插件。",
    "plugins.confirm_remove": "删除插件 {name}？", "plugins.name": "名称", "plugins.state": "状态",
    "plugins.health": "健康", "plugins.version": "版本", "plugins.kind": "类型",
    "memory.timeline": "上下文时间线", "memory.documents": "文档", "memory.graph": "图谱",
    "memory.stats": "统计", "memory.search": "搜索记忆…", "memory.depth": "深度",
    "memory.no_graph_lib": "未安装图形库（npm install）：以列表显示。",
    "memory.empty": "这里还没有内容。", "memory.media": "媒体",
    "memory.media_summary": "已存 {n} 项，{size}；{refs} 个引用",
    "memory.media_refs": "{n} 个引用", "memory.media_gone": "字节已{state}；描述仍保留",
    "knowledge.new": "新建条目", "knowledge.name": "名称", "knowledge.content": "内容（Markdown）",
    "knowledge.save": "保存", "knowledge.delete": "删除", "knowledge.search": "搜索知识库…",
    "knowledge.confirm_delete": "删除知识条目 {name}？", "knowledge.preview": "预览",
    "adapters.builtin": "内置", "adapters.user": "自定义", "adapters.save": "保存", "adapters.save_as": "另存为自定义",
    "adapters.delete": "删除", "adapters.new": "新建适配器", "adapters.ok": "已保存，适配器加载正常。",
    "adapters.confirm_delete": "删除自定义适配器 {name}？",
    "common.unavailable": "此守护进程尚未提供该功能（{msg}）。", "common.loading": "加载中…",
    "common.error": "错误：{msg}", "common.refresh": "刷新", "common.search": "搜索", "common.saved": "已保存。",
  },
};

export function currentLang() {
  const saved = localStorage.getItem("ha-lang");
  if (saved === "en" || saved === "zh") return saved;
  return (navigator.language || "en").toLowerCase().startsWith("zh") ? "zh" : "en";
}

export function setLang(lang) {
  localStorage.setItem("ha-lang", lang);
  document.documentElement.lang = lang === "zh" ? "zh-CN" : "en";
  applyI18n(document);
}

export function t(key, vars = {}) {
  const table = STRINGS[currentLang()] || STRINGS.en;
  let text = table[key] ?? STRINGS.en[key] ?? key;
  for (const [name, value] of Object.entries(vars)) text = text.replaceAll(`{${name}}`, String(value));
  return text;
}

export function applyI18n(root) {
  for (const el of root.querySelectorAll("[data-i18n]")) el.textContent = t(el.dataset.i18n);
  for (const el of root.querySelectorAll("[data-i18n-placeholder]")) el.placeholder = t(el.dataset.i18nPlaceholder);
  for (const el of root.querySelectorAll("[data-i18n-title]")) el.title = t(el.dataset.i18nTitle);
}
