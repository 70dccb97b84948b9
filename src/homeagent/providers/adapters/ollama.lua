-- Ollama (http://127.0.0.1:11434): /api/chat with NDJSON streaming, options{temperature,
-- num_predict}, tool calls with object arguments, "thinking" for reasoning models.
-- No key needed; one given is sent as a Bearer token (for proxies and Ollama cloud).
local text_of = openai_compat.text_of  -- plain text of a string or of content parts

local function images_of(content)
  if type(content) ~= "table" then return nil end
  local images = json.array()
  for _, p in ipairs(content) do
    if type(p) == "table" and p.type == "image_url" and type(p.image_url) == "table" then
      local data = tostring(p.image_url.url or ""):match("^data:[^;]+;base64,(.*)$")
      if data then images[#images + 1] = data end
    end
  end
  if #images > 0 then return images end
  return nil
end

local parse_args = openai_compat.parse_args  -- tool-call arguments as a table

-- Converted messages, kept across requests by their JSON text (each round of a
-- conversation re-sends the whole history): bounded in entries and bytes.
local cache = openai_compat.message_cache()
local json_string = openai_compat.json_string

-- One message -> an entry (the tool-call names it declares) and the Ollama message,
-- whose JSON text becomes entry.json; a tool result gets its tool_name when assembled
-- (it comes from an earlier message).
local function convert_one(m)
  local msg = { role = m.role, content = text_of(m.content) }
  if m.role == "developer" then msg.role = "system" end
  msg.images = images_of(m.content)
  local e = { json = false }
  if m.role == "assistant" then
    if type(m.reasoning_content) == "string" then msg.thinking = m.reasoning_content end
    if m.tool_calls then
      local calls, names = json.array(), { n = 0 }
      for j, tc in ipairs(m.tool_calls) do
        local fn = tc["function"] or {}
        names[2 * j - 1], names[2 * j], names.n = tc.id or "", fn.name, 2 * j
        calls[j] = { ["function"] = { name = fn.name, arguments = parse_args(fn.arguments) } }
      end
      msg.tool_calls = calls
      e.names = names
    end
  elseif m.role == "tool" then
    e.tool_id, e.fallback, e.for_name, e.named = m.tool_call_id or "", m.name, false, false
  end
  return e, msg
end

local function convert(req)
  local entries = openai_compat.each_message(req, cache, convert_one)
  local out, names = {}, {}
  for i = 1, #entries do
    local e = entries[i]
    local n = e.names
    if n then for j = 1, n.n, 2 do names[n[j]] = n[j + 1] end end
    local text = e.json
    if e.tool_id then
      local name = names[e.tool_id] or e.fallback
      if name ~= nil then
        if e.for_name ~= name then
          e.for_name, e.named = name, text:sub(1, -2) .. ',"tool_name":' .. json_string(name) .. "}"
        end
        text = e.named
      end
    end
    out[i] = text
  end
  return "[" .. table.concat(out, ",") .. "]"
end

local function finish(r, saw_calls)
  if saw_calls then return "tool_calls" end
  local reason = r.done_reason
  if reason == nil or reason == "" or reason == "stop" then return "stop" end
  return reason -- "length", "load", "unload"
end

local function usage(r)
  if r.prompt_eval_count == nil and r.eval_count == nil then return nil end
  return { prompt = r.prompt_eval_count or 0, completion = r.eval_count or 0 }
end

return {
  name = "ollama",
  version = "1.0",
  needs_api_key = false,
  endpoint = "/api/chat",

  headers = function(api_key)
    if api_key and api_key ~= "" then return { Authorization = "Bearer " .. api_key } end
    return {}
  end,

  transform_request = function(req)
    local body = { model = req.model, messages = json.raw(convert(req)), stream = req.stream and true or false }
    body.tools = openai_compat.tools(req) -- passed through as text while undecoded
    local options = {}
    if req.temperature ~= nil then options.temperature = req.temperature end
    if req.max_tokens ~= nil then options.num_predict = req.max_tokens end
    if type(req.extra) == "table" then
      for k, v in pairs(req.extra) do
        if k == "format" or k == "keep_alive" then body[k] = v else options[k] = v end
      end
    end
    if next(options) then body.options = options end
    if req.thinking then body.think = true end
    return body
  end,

  transform_response = function(raw)
    local r = json.decode(raw)
    if r.error then return { error = tostring(r.error), error_kind = "server" } end
    local m = r.message or {}
    local calls = {}
    for i, tc in ipairs(m.tool_calls or {}) do
      local fn = tc["function"] or {}
      calls[i] = { id = tc.id or "", name = fn.name, arguments = fn.arguments or json.object() }
    end
    return {
      content = m.content,
      reasoning_content = m.thinking,
      finish_reason = finish(r, #calls > 0),
      usage = usage(r),
      tool_calls = calls,
    }
  end,

  transform_stream_chunk = function(line, state)
    local r = json.decode(line)
    if r.error then return { error = tostring(r.error), error_kind = "server" } end
    local m = r.message or {}
    local out = { content = m.content, reasoning = m.thinking }
    if m.tool_calls then
      local calls = {}
      for i, tc in ipairs(m.tool_calls) do
        local fn = tc["function"] or {}
        local index = state.calls or 0
        state.calls = index + 1
        calls[i] = { index = index, id = tc.id or "", name = fn.name, arguments = fn.arguments or json.object() }
      end
      out.tool_calls = calls
    end
    if r.done then
      out.done = true
      out.finish_reason = finish(r, (state.calls or 0) > 0)
      out.usage = usage(r)
    end
    return out
  end,
}
