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
