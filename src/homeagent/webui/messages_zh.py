"""Chinese text of the messages the web UI shows, keyed by their English template.

Every ``Msg("...")`` template in ``src/homeagent`` has an entry here with the
same placeholders; tests/test_webui_messages.py reads the templates from the
source and fails on a missing entry, an entry nobody uses, or different
placeholders. Literal braces are doubled, as in the English template.
Setting names, commands and field names stay as they are (they are typed).
"""

from __future__ import annotations

ZH_MESSAGES: dict[str, str] = {
    # ---------------------------------------------------------------- web API (webui/*.py)
    "authentication required": "需要登录",
    "authentication required: send Authorization: Bearer <token> or sign in":
        "需要登录：发送 Authorization: Bearer <令牌>，或在网页上登录",
    "cross-origin write refused": "已拒绝来自其他站点的写入请求",
    "missing or wrong CSRF token (send the homeagent_csrf cookie's value as X-CSRF-Token)":
        "CSRF 令牌缺失或错误（请把 homeagent_csrf Cookie 的值作为 X-CSRF-Token 发送）",
    "this web UI answers only as {names}; Host {host!r} is not one of them (protection against DNS rebinding). "
    "To reach it by another name, add the name to webui.allowed_hosts.":
        "此网页界面只响应 {names}；Host {host!r} 不在其中（防止 DNS 重绑定攻击）。"
        "如需用其他名称访问，请把该名称加入 webui.allowed_hosts。",
    "internal error: {kind}": "内部错误：{kind}",
    "request body too large (limit {limit} bytes)": "请求体过大（上限 {limit} 字节）",
    "a JSON body is required": "需要 JSON 请求体",
    "malformed JSON: {reason}": "JSON 格式错误：{reason}",
    "malformed JSON: nested too deeply": "JSON 格式错误：嵌套层数过多",
    "malformed JSON: the body is not UTF-8": "JSON 格式错误：请求体不是 UTF-8 编码",
    "malformed JSON: {reason} at line {line} column {column}": "JSON 格式错误：第 {line} 行第 {column} 列：{reason}",
    "expected a JSON object, got {kind}": "需要一个 JSON 对象，收到的是 {kind}",
    "field {name!r} must be a string": "字段 {name!r} 必须是字符串",
    "field {name!r} must not be empty": "字段 {name!r} 不能为空",
    "field {name!r} is too long (limit {limit} characters)": "字段 {name!r} 过长（上限 {limit} 个字符）",
    "query parameter {name!r} must be a whole number": "查询参数 {name!r} 必须是整数",
    "{name} must be a whole number": "{name} 必须是整数",
    "{name} is out of range (18 digits at most)": "{name} 超出范围（最多 18 位数字）",
    "too many failed sign-ins; try again in {s} s": "登录失败次数过多，请 {s} 秒后再试",
    "wrong token": "令牌错误",
    "the API token is changed with `homeagent webui token`": "API 令牌请用 `homeagent webui token` 更换",
    'send a JSON object of settings: {{"key": value, ...}}': '请发送设置的 JSON 对象：{{"key": value, ...}}',
    "nothing was saved: some settings are invalid": "未保存任何内容：部分设置无效",
    "some settings could not be written": "部分设置无法写入",
    "read-only here: {reason}": "此处只读：{reason}",
    "this setting cannot be changed here": "此设置不能在这里修改",
    "unknown setting": "未知设置",
    "too many open streams; try again shortly": "打开的事件流过多，请稍后再试",
    "{key}: expected text": "{key}：需要文本",
    "server {name!r}: type the value of {var} again (it was shown masked)":
        "服务器 {name!r}：请重新输入 {var} 的值（它之前以掩码显示）",
    "invalid name {name!r}": "名称无效：{name!r}",
    "invalid knowledge entry name {name!r}: one name, no '/', not starting with '.'":
        "知识条目名称无效：{name!r}：只能是一个名称，不能含 '/'，不能以 '.' 开头",
    "cannot install: {reason}": "无法安装：{reason}",
    "give the full path of a plugin folder, .hmap or .zip on this machine":
        "请给出本机上插件文件夹、.hmap 或 .zip 文件的完整路径",
    "package too large (limit {mb} MB)": "插件包过大（上限 {mb} MB）",
    "malformed upload: {reason}": "上传格式错误：{reason}",
    "no package in the upload (field 'file')": "上传内容中没有插件包（字段 'file'）",
    "send the .hmap package as multipart field 'file' or as the request body":
        "请把 .hmap 插件包作为 multipart 字段 'file' 或作为请求体发送",
    "query parameter 'q' is required": "缺少查询参数 'q'",
    "no knowledge entry named {name!r}": "没有名为 {name!r} 的知识条目",
    "no adapter named {name!r}": "没有名为 {name!r} 的适配器",
    "no adapter of yours named {name!r} (built-in adapters cannot be deleted)":
        "你没有名为 {name!r} 的适配器（内置适配器不能删除）",
    "the media store is off (core.memory.media.enabled)": "媒体库未开启（core.memory.media.enabled）",
    "unknown state {state!r}; one of {states}": "未知状态 {state!r}；可选：{states}",
    "{ref!r} is not a media digest": "{ref!r} 不是媒体摘要",
    "the file's bytes are gone ({state}); what memory kept of it is its description":
        "文件内容已不在（{state}）；记忆中只保留了它的描述",
    "busy: more than {rate:g} interrupts a second from this client; this one was dropped":
        "忙碌：此客户端每秒打断超过 {rate:g} 次；本次已忽略",
    "busy: {taken} turns of this client are still queued or running "
    "(plugin.webui.max_concurrent_turns = {limit}); wait for one to finish":
        "忙碌：此客户端还有 {taken} 轮对话在排队或运行"
        "（plugin.webui.max_concurrent_turns = {limit}）；请等其中一轮结束",
    # ---------------------------------------------------------------- settings (config/)
    "{key}: {message}": "{key}：{message}",
    "a setting needs a non-empty name": "设置名称不能为空",
    "a plugin setting is written plugin.<plugin name>.<key>": "插件设置的写法是 plugin.<插件名>.<键>",
    "a plugin name must be non-empty and contain no '.'": "插件名不能为空，也不能包含 '.'",
    "an LLM source setting is written core.llm.sources.<name>.<field>":
        "LLM 源设置的写法是 core.llm.sources.<名称>.<字段>",
    "unknown LLM source field {field!r} (known: {known})": "未知的 LLM 源字段 {field!r}（已知：{known}）",
    'unknown LLM source field {field!r} (known: {known}); did you mean "{close}"?':
        '未知的 LLM 源字段 {field!r}（已知：{known}）；你是不是想用 "{close}"？',
    'unknown setting; did you mean "{close}"?': '未知设置；你是不是想用 "{close}"？',
    "unknown setting; `homeagent config list` shows every setting": "未知设置；`homeagent config list` 会列出全部设置",
    "cannot write to {path}: {reason}": "无法写入 {path}：{reason}",
    "a setting's name is at most {max} characters (this one has {n})": "设置名称最多 {max} 个字符（这个有 {n} 个）",
    "a setting's name cannot contain {bad!r}": "设置名称不能包含 {bad!r}",
    "a setting's name has no empty parts (no leading, trailing or doubled dots)":
        "设置名称不能有空的部分（开头、结尾不能是点，也不能有连续的点）",
    "use a number with a unit, e.g. 250ms, 30s, 10m, 1h30m, 2d": "请用带单位的数字，例如 250ms、30s、10m、1h30m、2d",
    "an empty value is not a duration; {hint}": "空值不是时长；{hint}",
    "{text!r} is negative; a duration here must be zero or more": "{text!r} 是负数；这里的时长必须大于或等于零",
    "{text!r} has no unit; did you mean {s}s? ({hint})": "{text!r} 没有单位；你是不是想写 {s}s？（{hint}）",
    "{text!r} is not a duration; {hint}": "{text!r} 不是时长；{hint}",
    "{shown} is longer than the longest duration allowed (100 years)": "{shown} 超过了允许的最长时长（100 年）",
    "{seconds!r} is not a valid number of seconds": "{seconds!r} 不是有效的秒数",
    "{seconds:g} seconds is longer than the longest duration allowed (100 years)":
        "{seconds:g} 秒超过了允许的最长时长（100 年）",
    "{shown} is not true or false (use true/false, yes/no, on/off or 1/0)":
        "{shown} 不是真或假（请用 true/false、yes/no、on/off 或 1/0）",
    "{shown} is not a whole number": "{shown} 不是整数",
    "{shown} is not a number": "{shown} 不是数字",
    "{shown} is not a finite number": "{shown} 不是有限的数字",
    "{shown} is out of range (a whole number of at most 18 digits)": "{shown} 超出范围（整数最多 18 位）",
    "{item!r} is not a finite number": "{item!r} 不是有限的数字",
    "an object's keys must be text": "对象的键必须是文本",
    "a {kind} cannot be stored as a setting": "{kind} 类型的值不能存为设置",
    "{shown} cannot be stored as JSON": "{shown} 不能存为 JSON",
    "{name} is not a number JSON allows": "{name} 不是 JSON 允许的数字",
    "the value": "该值",
    "a number of {bits} bits": "一个 {bits} 位的数字",
    "a value is required (delete the setting to go back to its default)": "需要一个值（删除该设置即可恢复默认值）",
    "the value is not valid here (expected {expected})": "该值在此无效（应为{expected}）",
    "this setting is required and cannot be empty": "此设置为必填，不能为空",
    "text": "文本",
    "a whole number": "整数",
    "a number": "数字",
    "true or false": "真或假",
    "{shown} is not text": "{shown} 不是文本",
    "{shown} is not a duration; {hint}": "{shown} 不是时长；{hint}",
    "is not valid JSON ({reason} at line {line} column {column})": "不是有效的 JSON（第 {line} 行第 {column} 列：{reason}）",
    "{shown} cannot be stored as JSON (finite numbers only)": "{shown} 不能存为 JSON（只允许有限的数字）",
    "{shown} is not one of {options}": "{shown} 不是以下选项之一：{options}",
    "{value!r} is not one of {options}": "{value!r} 不是以下选项之一：{options}",
    "{shown} is below the minimum of {min:g}": "{shown} 低于最小值 {min:g}",
    "{shown} is above the maximum of {max:g}": "{shown} 高于最大值 {max:g}",
    "{shown} is below the minimum of {min:g} seconds": "{shown} 低于最小值 {min:g} 秒",
    "{shown} is above the maximum of {max:g} seconds": "{shown} 高于最大值 {max:g} 秒",
    # ---------------------------------------------------------------- LLM sources (llm_control, providers)
    "unknown LLM source {name!r} (known: {known})": "未知的 LLM 源 {name!r}（已知：{known}）",
    "unknown LLM source '{name}' (available: {names})": "未知的 LLM 源 '{name}'（可用：{names}）",
    "a source name is 1-40 letters, digits, '-' or '_', starting with a letter or digit":
        "源名称须为 1-40 个字母、数字、'-' 或 '_'，并以字母或数字开头",
    "the source name {name!r} is reserved; pick another": "源名称 {name!r} 是保留名称，请换一个",
    "base_url {url!r} must start with http:// or https:// and name a host":
        "base_url {url!r} 必须以 http:// 或 https:// 开头并包含主机名",
    "adapter {adapter!r} not found (available: {names})": "找不到适配器 {adapter!r}（可用：{names}）",
    "base_url is required": "必须填写 base_url",
    "model is required": "必须填写 model",
    "{field}: {problem}": "{field}：{problem}",
    "no configured LLM source named {name!r} (sources from the environment are removed there)":
        "没有已配置的名为 {name!r} 的 LLM 源（来自环境变量的源请在环境变量中删除）",
    'send {{"names": [source, ...]}} in the order to try them': '请按尝试顺序发送 {{"names": [源, ...]}}',
    "the order must name every source once: {names}": "顺序中必须把每个源恰好列出一次：{names}",
    "none": "无",
    # ---------------------------------------------------------------- adapters (providers/adapter_loader)
    "invalid adapter name {name!r}": "适配器名称无效：{name!r}",
    "adapter '{name}' not found (available: {names})": "找不到适配器 '{name}'（可用：{names}）",
    "adapter file {path} cannot be read: {reason}": "无法读取适配器文件 {path}：{reason}",
    "{chunk}: the script must return a table (got {kind})": "{chunk}：脚本必须返回一个 table（实际是 {kind}）",
    "{chunk}: give either 'transform_request' or 'request_format', not both":
        "{chunk}：'transform_request' 和 'request_format' 只能给出一个",
    "{chunk}: field '{key}' is missing, expected a {want}": "{chunk}：缺少字段 '{key}'，应为 {want}",
    "{chunk}: field '{key}' is a {actual}, expected a {want}": "{chunk}：字段 '{key}' 是 {actual}，应为 {want}",
    "{chunk}: field 'request_format' is {fmt!r}, expected one of: {known}":
        "{chunk}：字段 'request_format' 是 {fmt!r}，应为以下之一：{known}",
    "{chunk}: 'request_format' needs {lib}, which is missing": "{chunk}：'request_format' 需要 {lib}，但它不存在",
    "{chunk}: request_options.{key} is not an option; known: {known}":
        "{chunk}：request_options.{key} 不是可用选项；已知：{known}",
    "{chunk}: request_options.{key} must be a table of names set to true, e.g. {{reasoning_content = true}}":
        "{chunk}：request_options.{key} 必须是名称设为 true 的 table，例如 {{reasoning_content = true}}",
    "{chunk}: request_options.{key} must be a {want}": "{chunk}：request_options.{key} 必须是 {want}",
    # ---------------------------------------------------------------- approvals
    "approvals are answered only through the local socket or the web UI": "审批只能通过本地套接字或网页界面回答",
    "no pending approval request {id!r} (answered, timed out or withdrawn); see `homeagent approvals list`":
        "没有待处理的审批请求 {id!r}（已回答、已超时或已撤回）；见 `homeagent approvals list`",
    "a rule needs a tool and a pattern": "规则需要工具和匹配模式",
    "{tools} are approved one call at a time; an always rule cannot cover them":
        "{tools} 只能逐次批准；“始终允许”规则不能涵盖它们",
    "'id' must be the request's id (see `homeagent approvals list`)": "'id' 必须是请求的 id（见 `homeagent approvals list`）",
    "'decision' must be 'allow' or 'deny'": "'decision' 必须是 'allow' 或 'deny'",
    "'always' must be true or false and 'pattern' a string": "'always' 必须是 true 或 false，'pattern' 必须是字符串",
    "'always' goes with 'allow' only": "'always' 只能与 'allow' 一起使用",
    "'id' must be a rule number (see `homeagent approvals rules`)": "'id' 必须是规则编号（见 `homeagent approvals rules`）",
    "no always rule #{rule}": "没有编号为 #{rule} 的“始终允许”规则",
    # ---------------------------------------------------------------- knowledge
    "a knowledge name must be a string": "知识名称必须是字符串",
    "a knowledge name cannot be empty": "知识名称不能为空",
    "a knowledge name is at most {max} characters": "知识名称最多 {max} 个字符",
    "{name!r}: a knowledge name cannot contain path separators or control characters":
        "{name!r}：知识名称不能包含路径分隔符或控制字符",
    "{name!r}: a knowledge name cannot contain '..' or start with '.'": "{name!r}：知识名称不能包含 '..'，也不能以 '.' 开头",
    "{name!r} does not name a folder directly under the knowledge base": "{name!r} 不是知识库根目录下的文件夹",
    "knowledge content cannot be empty": "知识内容不能为空",
    "knowledge content is {size} bytes; the limit is {limit}": "知识内容有 {size} 字节；上限是 {limit}",
    "a knowledge entry named {name!r} already exists": "名为 {name!r} 的知识条目已存在",
    "{name!r} is a symbolic link; remove it by hand": "{name!r} 是符号链接；请手动删除",
    # ---------------------------------------------------------------- media store
    "{ref!r} is not a media digest (hex sha256, at least {min} characters)":
        "{ref!r} 不是媒体摘要（十六进制 sha256，至少 {min} 个字符）",
    "digest {ref!r} is too short: give at least {min} hex characters": "摘要 {ref!r} 太短：请至少给出 {min} 个十六进制字符",
    "no stored media has the digest {digest}": "没有摘要为 {digest} 的媒体",
    "digest {digest} matches more than one media item; give more of it": "摘要 {digest} 匹配到多个媒体；请多给出几位",
    "media {short} ({mime}) is missing from disk; its description is kept: {description}":
        "媒体 {short}（{mime}）在磁盘上找不到了；保留了它的描述：{description}",
    "the bytes of media {short} ({mime}) {why}; its description is kept: {description}":
        "媒体 {short}（{mime}）的内容{why}；保留了它的描述：{description}",
    "was evicted by the media GC on {when}; store the file again to bring it back":
        "已于 {when} 被媒体清理回收；重新存入该文件即可恢复",
    "was damaged on disk and moved to {folder} on {when}": "在磁盘上已损坏，已于 {when} 移到 {folder}",
    "is missing from disk": "在磁盘上找不到了",
    "is {state}": "处于 {state} 状态",
    "(none)": "（无）",
    "moved to {dest}": "已移到 {dest}",
    "the file was gone": "文件已不存在",
    "media {short} is damaged on disk ({reason}); {where}. Its description is kept: {description}":
        "媒体 {short} 在磁盘上已损坏（{reason}）；{where}。保留了它的描述：{description}",
    # ---------------------------------------------------------------- plugins (registry, packages, manifests)
    "no plugin named {name!r}": "没有名为 {name!r} 的插件",
    "no plugin named {name!r}; did you mean {close}?": "没有名为 {name!r} 的插件；你是不是想用 {close}？",
    "plugin {name!r} is no longer installed": "插件 {name!r} 已不再安装",
    "{name!r} is a built-in plugin and cannot be removed; disable it instead": "{name!r} 是内置插件，不能删除；可以停用它",
    "{name!r} is the name of a built-in plugin; choose another name": "{name!r} 是内置插件的名称；请换一个名称",
    "plugin {name!r} is already installed; use --upgrade to replace it": "插件 {name!r} 已安装；如需替换请用 --upgrade",
    "plugin {name!r} is already installed at {target}; use --upgrade to replace it":
        "插件 {name!r} 已安装在 {target}；如需替换请用 --upgrade",
    "cannot link the shipped plugin {name!r} into {folder}: {reason}": "无法把随附插件 {name!r} 链接到 {folder}：{reason}",
    "invalid plugin name {name!r}": "插件名称无效：{name!r}",
    "plugin {name!r} is not installed in {folder}": "插件 {name!r} 没有安装在 {folder}",
    "cannot read package {path}: {reason}": "无法读取插件包 {path}：{reason}",
    "package {name} is {mb:.1f} MB; the limit is {limit} MB": "插件包 {name} 有 {mb:.1f} MB；上限是 {limit} MB",
    "{name} is not a zip archive (a .hmap package is a zip file)": "{name} 不是 zip 压缩包（.hmap 插件包是 zip 文件）",
    "{name} is a damaged zip archive: {reason}": "{name} 是损坏的 zip 压缩包：{reason}",
    "{name}: entry {entry!r} named in plugin.json is not in the package": "{name}：plugin.json 中的入口 {entry!r} 不在插件包里",
    "package has {n} entries; the limit is {limit}": "插件包有 {n} 个条目；上限是 {limit}",
    "unsafe entry {name!r}: it {problem}": "不安全的条目 {name!r}：它{problem}",
    "contains a NUL byte": "包含 NUL 字节",
    "contains a backslash": "包含反斜杠",
    "is an absolute path": "是绝对路径",
    "starts with a drive letter": "以盘符开头",
    "contains '..'": "包含 '..'",
    "unsafe entry {name!r}: symbolic links are not allowed in a package": "不安全的条目 {name!r}：插件包中不允许符号链接",
    "entry {name!r} is encrypted; packages must not be encrypted": "条目 {name!r} 已加密；插件包不能加密",
    "entry {name!r} appears twice in the package": "条目 {name!r} 在插件包中出现了两次",
    "package would unpack to more than {limit} MB (possible zip bomb)": "插件包解压后会超过 {limit} MB（可能是 zip 炸弹）",
    "entry {name!r} expands {ratio}x (limit {limit}x; possible zip bomb)":
        "条目 {name!r} 解压后膨胀 {ratio} 倍（上限 {limit} 倍；可能是 zip 炸弹）",
    "package has no plugin.json (nor a SKILL.md) at its top level": "插件包顶层没有 plugin.json（也没有 SKILL.md）",
    "{src} has no {manifest} and no SKILL.md: it is not a plugin folder": "{src} 没有 {manifest} 也没有 SKILL.md：它不是插件文件夹",
    "unsafe entry {name!r}: it leaves the plugin folder": "不安全的条目 {name!r}：它会写到插件文件夹之外",
    "package unpacks to more than its declared size (possible zip bomb)": "插件包解压后超过了声明的大小（可能是 zip 炸弹）",
    "cannot download {url!r}: only http:// and https:// URLs are supported": "无法下载 {url!r}：只支持 http:// 和 https:// 地址",
    "download of {url} failed: HTTP {status}": "下载 {url} 失败：HTTP {status}",
    "{url} is {mb:.1f} MB; the limit is {limit} MB": "{url} 有 {mb:.1f} MB；上限是 {limit} MB",
    "{url} is larger than {limit} MB; download stopped": "{url} 超过 {limit} MB；已停止下载",
    "download of {url} failed: {kind}: {reason}": "下载 {url} 失败：{kind}：{reason}",
    "{path} is a symbolic link; packages cannot contain links": "{path} 是符号链接；插件包不能包含链接",
    "entry {entry!r} named in plugin.json is not in {src}": "plugin.json 中的入口 {entry!r} 不在 {src} 里",
    "the package would be larger than {limit} MB": "插件包会超过 {limit} MB",
    "{source}: {problems}": "{source}：{problems}",
    "{version!r} is not a version number like 1.2.3": "{version!r} 不是形如 1.2.3 的版本号",
    "must be a JSON object, got {kind}": "必须是 JSON 对象，实际是 {kind}",
    "field {key!r} is missing": "缺少字段 {key!r}",
    "field {key!r} must be a string, got {kind}": "字段 {key!r} 必须是字符串，实际是 {kind}",
    "field {key!r} must not be empty": "字段 {key!r} 不能为空",
    "field {key!r} must be a list of strings, got {kind}": "字段 {key!r} 必须是字符串列表，实际是 {kind}",
    "field 'deprecated' must be true or false, got {kind}": "字段 'deprecated' 必须是 true 或 false，实际是 {kind}",
    "name {name!r} must be 1-64 characters of letters, digits, '_' or '-', starting with a letter or digit":
        "名称 {name!r} 必须是 1-64 个字母、数字、'_' 或 '-'，并以字母或数字开头",
    "version: {problem}": "version：{problem}",
    "min_version: {problem}": "min_version：{problem}",
    "env: {var!r} is not an environment variable name (letters, digits, '_')": "env：{var!r} 不是环境变量名（字母、数字、'_'）",
    "env: {var!r} is the daemon's own setting and is never passed to plugins": "env：{var!r} 是守护进程自己的设置，从不传给插件",
    "platforms: unknown platform {platform!r} (known: {known})": "platforms：未知平台 {platform!r}（已知：{known}）",
    "is larger than {kb} KB": "超过 {kb} KB",
    "is not UTF-8 text": "不是 UTF-8 文本",
    "cannot be read ({reason})": "无法读取（{reason}）",
    "plugin {name!r} supports {platforms}, not this machine ({here})": "插件 {name!r} 支持 {platforms}，不支持本机（{here}）",
    "plugin {name!r} needs HomeAgent {version} or newer (this is {host})":
        "插件 {name!r} 需要 HomeAgent {version} 或更新版本（当前是 {host}）",
    "entry {entry!r} must be a path inside the plugin folder, not an absolute path": "入口 {entry!r} 必须是插件文件夹内的路径，不能是绝对路径",
    "entry {entry!r} must not contain '..'": "入口 {entry!r} 不能包含 '..'",
    # ---------------------------------------------------------------- MCP servers (builtin/mcp, shown on the MCP page)
    "servers is not JSON: {reason}": "servers 不是 JSON：{reason}",
    'servers must be a JSON list of {{name, command, args, env, url}} or {{"mcpServers": {{...}}}}':
        'servers 必须是由 {{name, command, args, env, url}} 组成的 JSON 列表，或 {{"mcpServers": {{...}}}}',
    "servers[{i}] is not an object": "servers[{i}] 不是对象",
    "servers[{i}]: name {name!r} must be 1-40 characters of a-z, 0-9, '_' or '-'":
        "servers[{i}]：名称 {name!r} 必须是 1-40 个 a-z、0-9、'_' 或 '-' 字符",
    "servers[{i}]: duplicate name {name!r}": "servers[{i}]：名称 {name!r} 重复",
    "server {name!r}: give exactly one of command (stdio) or url (HTTP)":
        "服务器 {name!r}：command（stdio）和 url（HTTP）必须且只能给出一个",
    "server {name!r}: args must be a list and env an object": "服务器 {name!r}：args 必须是列表，env 必须是对象",
    # ---------------------------------------------------------------- chat and conversations (webui/chat.py, conversation_routes.py, conversations/store.py)
    'no conversation {conversation} (deleted, or never made); GET /api/v1/conversations lists them':
        '没有对话 {conversation}（已删除，或从未创建）；GET /api/v1/conversations 可列出全部对话',
    "'conversation' must be a conversation id (a whole number)":
        "'conversation' 必须是对话编号（整数）",
    "'media' must be a list of at most 10 digests of uploaded files":
        "'media' 必须是已上传文件摘要的列表，最多 10 个",
    "the media store is off (core.memory.media.enabled); send the upload's note instead":
        '媒体库未开启（core.memory.media.enabled）；请改为发送上传说明',
    'media: {reason}':
        '媒体：{reason}',
    'the turn did not finish in time; its reply will appear in the history':
        '本轮未能及时完成；回复稍后会出现在历史记录中',
    "send the files as multipart/form-data (field 'file')":
        "请以 multipart/form-data 发送文件（字段 'file'）",
    "no file in the upload (field 'file')":
        "上传内容中没有文件（字段 'file'）",
    'the turn did not finish in time':
        '本轮未能及时完成',
    'upload too large (limit {mb} MB)':
        '上传内容过大（上限 {mb} MB）',
    'no such upload':
        '没有这个上传文件',
    "'q' is at most 500 characters":
        "'q' 最多 500 个字符",
    'format is md or json':
        '格式只能是 md 或 json',
    'a reply in this conversation is still running; stop it first (POST /api/v1/chat/cancel) or wait for it':
        '此对话中仍有回复正在生成；请先停止它（POST /api/v1/chat/cancel）或等待其完成',
    'nothing to regenerate: this conversation has no message of yours yet':
        '无可重新生成的内容：此对话中还没有你的消息',
    "'entry' (the id of the message to edit) is required":
        "需要 'entry'（要编辑的消息编号）",
    "'entry' must be the id of a message (a whole number)":
        "'entry' 必须是消息编号（整数）",
    'conversation {conversation} has no entry {entry}':
        '对话 {conversation} 中没有条目 {entry}',
    'entry {entry} is not a message of yours ({kind}); only those can be edited':
        '条目 {entry} 不是你的消息（{kind}）；只能编辑你的消息',
    'a title is at most {limit} characters (this one has {length})':
        '标题最多 {limit} 个字符（当前为 {length} 个）',
}
