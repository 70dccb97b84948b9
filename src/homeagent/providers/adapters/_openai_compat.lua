-- Helpers for adapters that speak the OpenAI chat-completions wire format.
-- Every adapter's sandbox gets this table as the global `openai_compat`.
-- Files whose name starts with "_" are libraries, not adapters.

local M = {}

-- OpenAI-style error object -> error kind understood by the provider manager.
-- The plain text of OpenAI message content: a string, or parts with a text field.
function M.text_of(content)
  if type(content) == "string" then return content end
  if type(content) ~= "table" then return "" end
  local parts = {}
  for _, p in ipairs(content) do
    if type(p) == "string" then parts[#parts + 1] = p
    elseif type(p) == "table" and type(p.text) == "string" then parts[#parts + 1] = p.text end
  end
  return table.concat(parts, "\n")
end

-- Tool-call arguments as a table: decoded from JSON text; text that is not a JSON object is kept as _raw.
function M.parse_args(arguments)
  if type(arguments) == "table" then return arguments end
  if type(arguments) ~= "string" or arguments == "" then return json.object() end
  local ok, v = pcall(json.decode, arguments)
  if ok and type(v) == "table" then return v end
  return json.object({ _raw = arguments })
end

function M.error_kind(err)
  if type(err) ~= "table" then return "server" end
  local t = tostring(err.type or err.code or err.status or "")
  if t:find("rate") or t:find("quota") or t == "429" or t:find("RESOURCE_EXHAUSTED") then return "rate_limit" end
  if t:find("auth") or t:find("permission") or t:find("invalid_api_key") or t == "401" or t == "403" then return "auth" end
  if t:find("invalid_request") or t:find("INVALID_ARGUMENT") then return "client" end
  return "server"
end

function M.error_message(err)
  if type(err) == "table" then return tostring(err.message or err.msg or json.encode(err)) end
  return tostring(err)
end

-- Copy the message list, leaving out the named per-message fields.
function M.strip_messages(messages, fields)
  local out = json.array()
  for i, m in ipairs(messages or {}) do
    local hit = false
    for k in pairs(fields) do
      if m[k] ~= nil then hit = true; break end
    end
    if hit then
      local c = {}
      for k, v in pairs(m) do
        if not fields[k] then c[k] = v end
      end
      out[i] = c
    else
      out[i] = m
    end
  end
  return out
end

-- A bounded cache of per-message conversions, keyed by each message's JSON text
-- (json.items). Every round of a conversation re-sends the whole history, so an
-- adapter that converts messages (Anthropic, Gemini, Ollama, Mistral) converts each
-- one once. A text is found by a fingerprint (its size and three 8-byte samples), then
-- compared: a long string used as a table key would be hashed byte by byte on every
-- request, while comparing texts of equal size is one memcmp. Texts that share a
-- fingerprint go to a table keyed by the text itself. Two generations, each at most
-- half of `max_entries` / `max_bytes`: a full generation retires the older one;
-- entries still in use move to the new one, so what the current conversation sends
-- stays cached.
local sample = string.unpack
local SHARED = {} -- in `texts`: several texts have this fingerprint, see `by_text`

local function key_of(text)
  local len = #text
  if len <= 40 then return text end -- short strings are hashed when made anyway
  return len ~ (sample("<i8", text, 33) * 31) ~ (sample("<i8", text, len // 2) * 1000003)
         ~ (sample("<i8", text, len - 8) * 998244353)
end

local function generation()
  return { texts = {}, entries = {}, by_text = {} }
end

function M.message_cache(max_entries, max_bytes)
  return { new = generation(), old = generation(), n = 0, bytes = 0,
           max_entries = (max_entries or 4096) // 2, max_bytes = (max_bytes or 8 * 1024 * 1024) // 2 }
end

local function find(g, key, text)
  local t = g.texts[key]
  if t == text then return g.entries[key] end
  if t == SHARED then return g.by_text[text] end
  return nil
end

-- An entry's size: its key, its JSON text twice (adapters keep a second form of some)
-- and what the adapter counted in `bytes`.
local function put(c, key, text, entry)
  local size = #text + 2 * #(entry.json or "") + (entry.bytes or 0) + 128
  if size > c.max_bytes then return end
  if c.n >= c.max_entries or c.bytes + size > c.max_bytes then
    c.old, c.new, c.n, c.bytes = c.new, generation(), 0, 0
  end
  local g = c.new
  local t = g.texts[key]
  if t == nil or t == text then
    g.texts[key], g.entries[key] = text, entry
  else
    if t ~= SHARED then
      g.by_text[t] = g.entries[key]
      g.texts[key], g.entries[key] = SHARED, nil
    end
    g.by_text[text] = entry
  end
  c.n, c.bytes = c.n + 1, c.bytes + size
end

-- From the older generation (then moved to the new one), or nil.
local function revive(c, key, text)
  local g = c.old
  local e = find(g, key, text)
  if e ~= nil then
    if g.texts[key] == text then g.texts[key], g.entries[key] = nil, nil else g.by_text[text] = nil end
    put(c, key, text, e)
  end
  return e
end

-- The cached entry for a message text, or nil.
function M.cache_get(c, text)
  local key = key_of(text)
  local e = find(c.new, key, text)
  if e == nil then e = revive(c, key, text) end
  return e
end

-- Stores `entry` for a message text.
function M.cache_put(c, text, entry)
  put(c, key_of(text), text, entry)
end

-- Each request message through `convert(m)` (m: the decoded message), cached in `cache`
-- (from M.message_cache) by the message's JSON text. convert returns `entry [, value]`:
-- when it gives a value, entry.json becomes value's JSON text (the new messages of a
-- request are encoded together, one call; an entry built with `json = false` has the
-- slot ready). Returns the entries, one per message.
-- An entry is shared by every later request with that message: it must depend on
-- nothing but `m` (resolve context such as tool-call names when assembling) and only
-- gain fields derived from it. Without message texts (the adapter read or replaced
-- req.messages first) every message is converted and nothing is cached.
function M.each_message(req, cache, convert)
  local texts = json.items(req, "messages")
  local out, values, owners, nv = {}, {}, {}, 0
  local function add(i, m)
    if m == nil then m = json.null end
    local e, v = convert(m)
    out[i] = e
    if v ~= nil then nv = nv + 1; values[nv], owners[nv] = v, e end
  end
  local miss, keys, nmiss = nil, nil, 0
  if not texts then
    for i, m in ipairs(req.messages or {}) do add(i, m) end
  else
    local g = cache.new
    local gtexts, gentries = g.texts, g.entries
    for i = 1, #texts do
      local text = texts[i]
      local key = key_of(text)
      local e
      if gtexts[key] == text then
        e = gentries[key]
      else
        e = find(g, key, text) or revive(cache, key, text)
        if e == nil then
          if not miss then miss, keys = {}, {} end
          nmiss = nmiss + 1
          miss[nmiss], keys[nmiss] = i, key
        end
        g = cache.new
        gtexts, gentries = g.texts, g.entries
      end
      out[i] = e
    end
    -- many new messages (a cold start): decode the whole list in one call
    local all = nmiss > 0 and nmiss * 3 >= #texts and req.messages
    for k = 1, nmiss do
      local i = miss[k]
      if all then add(i, all[i]) else add(i, json.decode(texts[i])) end
    end
  end
  if nv > 0 then
    local encoded = json.encode_each(values)
    for k = 1, nv do owners[k].json = encoded[k] end
  end
  for k = 1, nmiss do
    local i = miss[k]
    put(cache, keys[k], texts[i], out[i])
  end
  return out
end

-- The items of a JSON array text ("[a,b]" -> "a,b"), to join with others.
function M.inner(array_text)
  return array_text:sub(2, -2)
end

-- Builds a JSON array of turns from content lists kept as JSON text; consecutive lists
-- of one role merge into one turn. `open` maps a role to its turn's text up to the list
-- ('{"role":"user","content":'). t:add(role, list), t:raw(turn_text), t:empty(), t:text().
function M.turns(open)
  local out, no = { "[" }, 1
  local role, lists, nl = nil, {}, 0
  local function flush()
    if no > 1 then no = no + 1; out[no] = "," end
    out[no + 1] = open[role]
    if nl == 1 then
      out[no + 2] = lists[1]
    else
      for k = 1, nl do lists[k] = M.inner(lists[k]) end
      out[no + 2] = "[" .. table.concat(lists, ",", 1, nl) .. "]"
    end
    out[no + 3] = "}"
    no = no + 3
    role = nil
  end
  local t = {}
  function t.add(_, r, list)
    if r ~= role then
      if role then flush() end
      role, nl = r, 0
    end
    nl = nl + 1
    lists[nl] = list
  end
  function t.raw(_, text)
    if role then flush() end
    if no > 1 then no = no + 1; out[no] = "," end
    no = no + 1
    out[no] = text
  end
  function t.empty() return no == 1 and role == nil end
  function t.text()
    if role then flush() end
    return table.concat(out, "", 1, no) .. "]"
  end
  return t
end

-- A string as JSON text; plain names (letters, digits, _ - .) without an encoder call.
function M.json_string(s)
  if type(s) == "string" and s:find("^[A-Za-z0-9_%-%.]*$") then return '"' .. s .. '"' end
  return json.encode(s)
end

-- Index of the last user message (messages after it belong to the current tool loop).
function M.last_user_index(messages)
  for i = #messages, 1, -1 do
    if messages[i].role == "user" then return i end
  end
  return 0
end

-- The unified request -> an OpenAI chat-completions body.
-- opts.stream_usage:   ask for a final usage chunk (stream_options.include_usage)
-- opts.strip:          per-message fields to drop (default {reasoning_content = true})
-- opts.max_tokens_field: "max_tokens" (default) or "max_completion_tokens"
-- opts.extra:          merge req.extra into the body (default true)
-- opts.drop_extra:     keys of req.extra never to forward
-- The request's messages, stripped of the named fields. While they are still
-- undecoded JSON text and mention none of those fields, they pass through as
-- text (json.raw) and are never decoded: the cheap path for big histories.
function M.messages(req, strip)
  local text = json.pending(req, "messages")
  if text then
    local clean = true
    for k in pairs(strip) do
      if text:find('"' .. k .. '"', 1, true) then clean = false; break end
    end
    if clean then return json.raw(text) end
  end
  if next(strip) == nil then return req.messages end
  return M.strip_messages(req.messages, strip)
end

-- The request's tools, as text when still undecoded.
function M.tools(req)
  local text = json.pending(req, "tools")
  if text then return json.raw(text) end
  if req.tools and #req.tools > 0 then return req.tools end
  return nil
end

function M.request(req, opts)
  opts = opts or {}
  local strip = opts.strip or { reasoning_content = true }
  local body = {
    model = req.model,
    messages = M.messages(req, strip),
    stream = req.stream and true or false,
  }
  local tools = M.tools(req)
  if tools then
    body.tools = tools
    if req.tool_choice ~= nil then body.tool_choice = req.tool_choice end
  end
  if req.temperature ~= nil then body.temperature = req.temperature end
  if req.max_tokens ~= nil then body[opts.max_tokens_field or "max_tokens"] = req.max_tokens end
  if req.stream and opts.stream_usage then body.stream_options = { include_usage = true } end
  if opts.extra ~= false and type(req.extra) == "table" then
    local drop = opts.drop_extra or {}
    for k, v in pairs(req.extra) do
      if not drop[k] then body[k] = v end
    end
  end
  return body
end

-- Content may be a string or a list of parts (text / thinking); returns text, reasoning.
function M.content_parts(content)
  if type(content) ~= "table" then return content, nil end
  local text, think = {}, {}
  for _, part in ipairs(content) do
    if type(part) == "string" then
      text[#text + 1] = part
    elseif type(part) == "table" then
      if part.type == "thinking" then
        local t = part.thinking
        if type(t) == "table" then
          for _, p in ipairs(t) do if type(p) == "table" and p.text then think[#think + 1] = p.text end end
        elseif type(t) == "string" then
          think[#think + 1] = t
        end
      elseif type(part.text) == "string" then
        text[#text + 1] = part.text
      end
    end
  end
  return table.concat(text), (#think > 0 and table.concat(think) or nil)
end

-- A complete (non-streamed) OpenAI response -> the unified response.
function M.response(raw)
  local r = json.decode(raw)
  if r.error ~= nil then
    return { error = M.error_message(r.error), error_kind = M.error_kind(r.error) }
  end
  local choice = r.choices and r.choices[1]
  if not choice then error("response has no choices", 0) end
  local msg = choice.message or {}
  local content, thinking = M.content_parts(msg.content)
  return {
    content = content,
    reasoning_content = msg.reasoning_content or msg.reasoning or thinking,
    finish_reason = choice.finish_reason,
    usage = r.usage or (r.x_groq and r.x_groq.usage),
    tool_calls = msg.tool_calls,
  }
end

-- One decoded stream document -> a unified chunk.
function M.chunk_doc(r)
  if r.error ~= nil then
    return { error = M.error_message(r.error), error_kind = M.error_kind(r.error) }
  end
  local out = { usage = r.usage or (r.x_groq and r.x_groq.usage) }
  local choice = r.choices and r.choices[1]
  if choice then
    local d = choice.delta or choice.message
    if d then
      local content, thinking = M.content_parts(d.content)
      out.content = content
      out.reasoning = d.reasoning_content or d.reasoning or thinking
      out.tool_calls = d.tool_calls
    end
    out.finish_reason = choice.finish_reason
  end
  return out
end

-- One streamed line ("data:" payload) -> a unified chunk.
function M.chunk(line)
  if line == "[DONE]" then return { done = true } end
  return M.chunk_doc(json.decode(line))
end

function M.bearer(api_key)
  if api_key == nil or api_key == "" then return {} end
  return { Authorization = "Bearer " .. api_key }
end

return M
