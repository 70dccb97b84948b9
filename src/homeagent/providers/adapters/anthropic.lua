-- Anthropic Messages API (https://api.anthropic.com): system prompt split out, content as
-- block arrays, tool_use / tool_result blocks, extended thinking, SSE event stream.
local VERSION_HEADER = "2023-06-01"
local DEFAULT_MAX_TOKENS = 8192

local text_of = openai_compat.text_of  -- plain text of a string or of content parts

-- OpenAI user content (string or parts with text / image_url) -> Anthropic blocks
local function user_blocks(content)
  if type(content) ~= "table" then
    local t = tostring(content or "")
    if t == "" then t = " " end
    return { { type = "text", text = t } }
  end
  local blocks = {}
  for _, p in ipairs(content) do
    if type(p) == "table" and p.type == "image_url" and type(p.image_url) == "table" then
      local url = tostring(p.image_url.url or "")
      local media, data = url:match("^data:([^;]+);base64,(.*)$")
      if media then
        blocks[#blocks + 1] = { type = "image", source = { type = "base64", media_type = media, data = data } }
      else
        blocks[#blocks + 1] = { type = "image", source = { type = "url", url = url } }
      end
    else
      local t = type(p) == "table" and p.text or p
      if type(t) == "string" and t ~= "" then blocks[#blocks + 1] = { type = "text", text = t } end
    end
  end
  if #blocks == 0 then blocks[1] = { type = "text", text = " " } end
  return blocks
end

local parse_args = openai_compat.parse_args  -- tool-call arguments as a table

-- Converted messages, kept across requests by their JSON text (each round of a
-- conversation re-sends the whole history): bounded in entries and bytes.
local cache = openai_compat.message_cache()

-- One message -> an entry and the value whose JSON text becomes entry.json: system
-- text, or a turn's content blocks. An assistant's signed thinking block is kept apart
-- (entry.think): it is sent only when the request uses thinking. `mrole`, `calls` and
-- `signed` feed thinking_possible.
local function convert_one(m)
  local role = m.role
  if role == "system" or role == "developer" then
    local t = text_of(m.content)
    return { mrole = role, system = t, bytes = #t }
  elseif role == "assistant" then
    local think
    if type(m.reasoning_content) == "string" and type(m.reasoning_signature) == "string" then
      think = json.encode({ type = "thinking", thinking = m.reasoning_content, signature = m.reasoning_signature })
    end
    local blocks = json.array()
    local t = text_of(m.content)
    if t ~= "" then blocks[#blocks + 1] = { type = "text", text = t } end
    for _, tc in ipairs(m.tool_calls or {}) do
      local fn = tc["function"] or {}
      blocks[#blocks + 1] = { type = "tool_use", id = tc.id, name = fn.name, input = parse_args(fn.arguments) }
    end
    local e = { mrole = role, role = "assistant", think = think, calls = m.tool_calls and true or false,
                signed = m.reasoning_signature and true or false, bytes = think and 2 * #think or 0,
                json = false, with_think = false }
    if #blocks == 0 then return e end
    return e, blocks
  elseif role == "tool" then
    local t = text_of(m.content)
    if t == "" then t = "(no output)" end
    return { mrole = role, role = "user", json = false },
           json.array({ { type = "tool_result", tool_use_id = m.tool_call_id, content = t } })
  end
  return { mrole = role, role = "user", json = false }, json.array(user_blocks(m.content))
end

-- Extended thinking with tools needs the signed thinking block of the current tool loop;
-- without it thinking is left off for this request.
local function thinking_possible(entries)
  for i = #entries, 1, -1 do
    local e = entries[i]
    if e.mrole == "user" then return true end
    if e.mrole == "assistant" and e.calls and not e.signed then return false end
  end
  return true
end

-- An entry's content blocks as a JSON array text (nil: none), with or without thinking.
local function blocks_of(e, thinking)
  if not (thinking and e.think) then return e.json end
  if not e.with_think then
    e.with_think = e.json and ("[" .. e.think .. "," .. e.json:sub(2)) or ("[" .. e.think .. "]")
  end
  return e.with_think
end

local TURN = { user = '{"role":"user","content":', assistant = '{"role":"assistant","content":' }

-- system text and messages (JSON text); consecutive turns of the same role are merged.
local function convert(entries, thinking)
  local system = {}
  local turns = openai_compat.turns(TURN)
  for i = 1, #entries do
    local e = entries[i]
    if e.system then
      if e.system ~= "" then system[#system + 1] = e.system end
    else
      local list = blocks_of(e, thinking)
      if list then
        if turns:empty() and e.role ~= "user" then -- the conversation must open with a user turn
          turns:raw('{"role":"user","content":[{"type":"text","text":"(continued)"}]}')
        end
        turns:add(e.role, list)
      end
    end
  end
  return table.concat(system, "\n\n"), turns:text()
end

-- Tool schemas pass through as JSON text: decoded with their "parameters" kept raw.
local function tools_of(req)
  local text = json.pending(req, "tools")
  local tools = text and json.decode(text, { raw = { "parameters" } }) or req.tools
  local out = json.array()
  for _, t in ipairs(tools or {}) do
    local fn = t["function"] or t
    out[#out + 1] = {
      name = fn.name,
      description = fn.description,
      input_schema = fn.parameters or { type = "object", properties = json.object() },
    }
  end
  return out
end

-- The same tools list is sent every round of a conversation: its converted JSON text is
-- kept, keyed by the request's tools JSON text (a few entries; emptied when full).
local tools_cache, tools_cached = {}, 0

local function tools_json(req)
  local text = json.pending(req, "tools")
  if not text then return tools_of(req) end
  local hit = tools_cache[text]
  if not hit then
    hit = json.encode(tools_of(req))
    if tools_cached >= 8 then tools_cache, tools_cached = {}, 0 end
    tools_cache[text], tools_cached = hit, tools_cached + 1
  end
  return json.raw(hit)
end

local function tool_choice(choice)
  if choice == nil then return nil end
  if choice == "auto" then return { type = "auto" } end
  if choice == "required" or choice == "any" then return { type = "any" } end
  if choice == "none" then return { type = "none" } end
  if type(choice) == "table" and type(choice["function"]) == "table" then
    return { type = "tool", name = choice["function"].name }
  end
  return nil
end

local STOP = { end_turn = "stop", stop_sequence = "stop", max_tokens = "length", tool_use = "tool_calls",
               refusal = "content_filter", pause_turn = "stop", model_context_window_exceeded = "length" }

local function error_kind(t)
  t = tostring(t or "")
  if t == "rate_limit_error" then return "rate_limit" end
  if t == "authentication_error" or t == "permission_error" then return "auth" end
  if t == "invalid_request_error" or t == "not_found_error" or t == "request_too_large" then return "client" end
  return "server" -- api_error, overloaded_error
end

local function usage(u)
  if type(u) ~= "table" then return nil end
  local input = u.input_tokens
  local cache_read = u.cache_read_input_tokens or 0
  local cache_write = u.cache_creation_input_tokens or 0
  return {
    prompt = input and (input + cache_read + cache_write) or 0,
    completion = u.output_tokens or 0,
    cache_read = cache_read,
  }
end

return {
  name = "anthropic",
  version = "1.0",
  endpoint = "/v1/messages",

  headers = function(api_key)
    return { ["x-api-key"] = api_key, ["anthropic-version"] = VERSION_HEADER }
  end,

  transform_request = function(req)
    local entries = openai_compat.each_message(req, cache, convert_one)
    local thinking = req.thinking and thinking_possible(entries)
    local system, messages = convert(entries, thinking)
    local max_tokens = req.max_tokens or DEFAULT_MAX_TOKENS
    local body = {
      model = req.model,
      messages = json.raw(messages),
      max_tokens = max_tokens,
      stream = req.stream and true or false,
      temperature = req.temperature,
    }
    if system ~= "" then body.system = system end
    if json.pending(req, "tools") or (req.tools and #req.tools > 0) then
      body.tools = tools_json(req)
      body.tool_choice = tool_choice(req.tool_choice)
    end
    if thinking then
      local budget = math.max(1024, max_tokens // 2)
      if max_tokens <= budget then body.max_tokens = budget + 1024 end
      body.thinking = { type = "enabled", budget_tokens = budget }
      body.temperature = nil -- thinking requires the default temperature
      if body.tool_choice and body.tool_choice.type ~= "auto" then body.tool_choice = { type = "auto" } end
    end
    if type(req.extra) == "table" then
      for _, k in ipairs({ "top_p", "top_k", "stop_sequences", "metadata", "service_tier" }) do
        if req.extra[k] ~= nil then body[k] = req.extra[k] end
      end
    end
    return body
  end,

  transform_response = function(raw)
    local r = json.decode(raw)
    if r.type == "error" or r.error then
      local e = r.error or {}
      return { error = e.message or "error", error_kind = error_kind(e.type) }
    end
    local text, thoughts, calls = {}, {}, {}
    for _, b in ipairs(r.content or {}) do
      if b.type == "text" then text[#text + 1] = b.text
      elseif b.type == "thinking" then thoughts[#thoughts + 1] = b.thinking
      elseif b.type == "tool_use" then calls[#calls + 1] = { id = b.id, name = b.name, arguments = b.input } end
    end
    return {
      content = table.concat(text),
      reasoning_content = table.concat(thoughts),
      finish_reason = STOP[r.stop_reason] or r.stop_reason,
      usage = usage(r.usage),
      tool_calls = calls,
    }
  end,

  transform_stream_chunk = function(line)
    local ev = json.decode(line)
    local t = ev.type
    if t == "content_block_delta" then
      local d = ev.delta or {}
      if d.type == "text_delta" then return { content = d.text } end
      if d.type == "input_json_delta" then
        return { tool_calls = { { index = ev.index, arguments = d.partial_json } } }
      end
      if d.type == "thinking_delta" then return { reasoning = d.thinking } end
      return nil -- signature_delta, citations
    elseif t == "content_block_start" then
      local b = ev.content_block or {}
      if b.type == "tool_use" then
        return { tool_calls = { { index = ev.index, id = b.id, name = b.name, arguments = "" } } }
      end
      if b.type == "text" and b.text and b.text ~= "" then return { content = b.text } end
      if b.type == "thinking" and b.thinking and b.thinking ~= "" then return { reasoning = b.thinking } end
      return nil
    elseif t == "message_start" then
      return { usage = usage((ev.message or {}).usage) }
    elseif t == "message_delta" then
      local d = ev.delta or {}
      return { finish_reason = STOP[d.stop_reason] or d.stop_reason, usage = usage(ev.usage) }
    elseif t == "message_stop" then
      return { done = true }
    elseif t == "error" then
      local e = ev.error or {}
      return { error = e.message or "stream error", error_kind = error_kind(e.type) }
    end
    return nil -- ping, content_block_stop
  end,
}
