-- Google Gemini (https://generativelanguage.googleapis.com, v1beta): contents/parts with
-- role "model", functionCall / functionResponse, systemInstruction, key in x-goog-api-key.
local function model_path(model)
  model = tostring(model or "")
  if model:find("^models/") or model:find("^tunedModels/") then return model end
  return "models/" .. model
end

local text_of = openai_compat.text_of  -- plain text of a string or of content parts

local function user_parts(content)
  if type(content) ~= "table" then return { { text = tostring(content or "") } } end
  local parts = {}
  for _, p in ipairs(content) do
    if type(p) == "table" and p.type == "image_url" and type(p.image_url) == "table" then
      local media, data = tostring(p.image_url.url or ""):match("^data:([^;]+);base64,(.*)$")
      if media then parts[#parts + 1] = { inlineData = { mimeType = media, data = data } } end
    elseif type(p) == "table" and p.type == "input_audio" and type(p.input_audio) == "table" then
      local fmt = tostring(p.input_audio.format or "wav")
      parts[#parts + 1] = { inlineData = { mimeType = "audio/" .. fmt, data = tostring(p.input_audio.data or "") } }
    else
      local t = type(p) == "table" and p.text or p
      if type(t) == "string" then parts[#parts + 1] = { text = t } end
    end
  end
  if #parts == 0 then parts[1] = { text = "" } end
  return parts
end

-- Gemini accepts an OpenAPI subset of JSON Schema; drop what it rejects.
local SCHEMA_KEYS = { type = true, format = true, title = true, description = true, nullable = true, enum = true,
  maxItems = true, minItems = true, properties = true, required = true, minProperties = true, maxProperties = true,
  minLength = true, maxLength = true, pattern = true, example = true, anyOf = true, propertyOrdering = true,
  default = true, items = true, minimum = true, maximum = true }

local function schema(s)
  if type(s) ~= "table" then return s end
  local out = {}
  for k, v in pairs(s) do
    if k == "properties" and type(v) == "table" then
      local props = json.object()
      for name, sub in pairs(v) do props[name] = schema(sub) end
      out.properties = props
    elseif k == "items" then
      out.items = schema(v)
    elseif k == "anyOf" and type(v) == "table" then
      local list = json.array()
      for i, sub in ipairs(v) do list[i] = schema(sub) end
      out.anyOf = list
    elseif k == "type" and type(v) == "table" then
      for _, t in ipairs(v) do
        if t == "null" then out.nullable = true elseif out.type == nil then out.type = t end
      end
    elseif k == "const" then
      out.enum = json.array({ v })
    elseif SCHEMA_KEYS[k] then
      out[k] = v
    end
  end
  return out
end

-- OpenAI tools -> Gemini's [{functionDeclarations = ...}] as JSON text. The same tools
-- list is sent every round of a conversation, so the text is kept, keyed by the request's
-- tools JSON text (a few entries; emptied when full).
local tools_cache, tools_cached = {}, 0

local function tools_json(req)
  local text = json.pending(req, "tools")
  local hit = text and tools_cache[text]
  if hit then return hit end
  local decls = json.array()
  for _, t in ipairs(text and json.decode(text) or req.tools) do
    local fn = t["function"] or t
    decls[#decls + 1] = { name = fn.name, description = fn.description, parameters = schema(fn.parameters) }
  end
  local out = json.encode(json.array({ { functionDeclarations = decls } }))
  if text then
    if tools_cached >= 8 then tools_cache, tools_cached = {}, 0 end
    tools_cache[text], tools_cached = out, tools_cached + 1
  end
  return out
end

local parse_args = openai_compat.parse_args  -- tool-call arguments as a table
local json_string = openai_compat.json_string

-- Converted messages, kept across requests by their JSON text (each round of a
-- conversation re-sends the whole history): bounded in entries and bytes.
local cache = openai_compat.message_cache()

-- One message -> an entry and the value whose JSON text becomes entry.json: a system
-- part, a turn's parts (with the tool-call names they declare), or a tool result's
-- response (its function name comes from an earlier message: added when assembling).
local function convert_one(m)
  local role = m.role
  if role == "system" or role == "developer" then
    local t = text_of(m.content)
    if t == "" then return {} end
    return { system = true, json = false }, { text = t }
  elseif role == "assistant" then
    local parts, names = json.array(), nil
    local t = text_of(m.content)
    if t ~= "" then parts[#parts + 1] = { text = t } end
    for i, tc in ipairs(m.tool_calls or {}) do
      local fn = tc["function"] or {}
      names = names or { n = 0 }
      names[2 * i - 1], names[2 * i], names.n = tc.id or "", fn.name, 2 * i
      parts[#parts + 1] = { functionCall = { name = fn.name, args = parse_args(fn.arguments) } }
    end
    if #parts == 0 then return { names = names } end
    return { role = "model", names = names, json = false }, parts
  elseif role == "tool" then
    return { role = "user", tool_id = m.tool_call_id or "", fallback = m.name or "tool", json = false,
             for_name = false, parts = false }, { content = text_of(m.content) }
  end
  return { role = "user", json = false }, json.array(user_parts(m.content))
end

-- A tool result's parts (JSON array text) for the function name it answers.
local function response_parts(e, name)
  if e.for_name ~= name then
    e.for_name = name
    e.parts = '[{"functionResponse":{"name":' .. json_string(name) .. ',"response":' .. e.json .. "}}]"
  end
  return e.parts
end

local TURN = { user = '{"role":"user","parts":', model = '{"role":"model","parts":' }

-- systemInstruction and contents as JSON text; consecutive turns of the same role merge.
local function convert(req)
  local entries = openai_compat.each_message(req, cache, convert_one)
  local system, names = {}, {}
  local turns = openai_compat.turns(TURN)
  for i = 1, #entries do
    local e = entries[i]
    local n = e.names
    if n then for j = 1, n.n, 2 do names[n[j]] = n[j + 1] end end
    local list
    if e.tool_id then
      list = response_parts(e, names[e.tool_id] or e.fallback)
    elseif e.system then
      system[#system + 1] = e.json
    elseif e.role then
      list = e.json
    end
    if list then turns:add(e.role, list) end
  end
  local instruction = #system > 0 and ('{"parts":[' .. table.concat(system, ",") .. "]}") or nil
  return instruction, turns:text()
end

local FINISH = { STOP = "stop", MAX_TOKENS = "length", SAFETY = "content_filter", RECITATION = "content_filter",
  BLOCKLIST = "content_filter", PROHIBITED_CONTENT = "content_filter", SPII = "content_filter",
  IMAGE_SAFETY = "content_filter", LANGUAGE = "content_filter", MALFORMED_FUNCTION_CALL = "stop", OTHER = "stop" }

local function error_kind(e)
  local status = tostring(e.status or "")
  local code = tonumber(e.code) or 0
  if status == "RESOURCE_EXHAUSTED" or code == 429 then return "rate_limit" end
  if status == "UNAUTHENTICATED" or status == "PERMISSION_DENIED" or code == 401 or code == 403 then return "auth" end
  if status == "INVALID_ARGUMENT" or status == "NOT_FOUND" or status == "FAILED_PRECONDITION" then return "client" end
  return "server"
end

local function usage(u)
  if type(u) ~= "table" then return nil end
  local thoughts = u.thoughtsTokenCount or 0
  return {
    prompt = u.promptTokenCount or 0,
    completion = (u.candidatesTokenCount or 0) + thoughts,
    total = u.totalTokenCount or 0,
    cache_read = u.cachedContentTokenCount or 0,
    reasoning = thoughts,
  }
end

-- One GenerateContentResponse (whole, or one stream event) -> unified fields.
local function parse(r, state)
  if r.error then
    return { error = r.error.message or "error", error_kind = error_kind(r.error) }
  end
  local out = { usage = usage(r.usageMetadata) }
  local cand = r.candidates and r.candidates[1]
  if not cand then
    if r.promptFeedback and r.promptFeedback.blockReason then
      out.finish_reason = "content_filter"
      out.content = ""
    end
    return out
  end
  local text, thoughts, calls = {}, {}, {}
  for _, p in ipairs((cand.content or {}).parts or {}) do
    if p.functionCall then
      local index = state and state.calls or #calls
      if state then state.calls = index + 1 end
      calls[#calls + 1] = { index = index, id = p.functionCall.id or "", name = p.functionCall.name,
                            arguments = p.functionCall.args or json.object() }
    elseif type(p.text) == "string" then
      if p.thought then thoughts[#thoughts + 1] = p.text else text[#text + 1] = p.text end
    end
  end
  out.content = table.concat(text)
  out.reasoning = table.concat(thoughts)
  if #calls > 0 then
    out.tool_calls = calls
    if state then state.saw_calls = true end
  end
  if cand.finishReason then
    local f = FINISH[cand.finishReason] or string.lower(cand.finishReason)
    if f == "stop" and (#calls > 0 or (state and state.saw_calls)) then f = "tool_calls" end
    out.finish_reason = f
  end
  return out
end

return {
  name = "gemini",
  version = "1.0",

  endpoint = function(ctx)
    local action = ctx.stream and ":streamGenerateContent?alt=sse" or ":generateContent"
    return "/v1beta/" .. model_path(ctx.model) .. action
  end,

  headers = function(api_key)
    return { ["x-goog-api-key"] = api_key }
  end,

  transform_request = function(req)
    local system, contents = convert(req)
    local body = { contents = json.raw(contents) }
    if system then body.systemInstruction = json.raw(system) end
    local gen = {}
    if req.temperature ~= nil then gen.temperature = req.temperature end
    if req.max_tokens ~= nil then gen.maxOutputTokens = req.max_tokens end
    if req.thinking then gen.thinkingConfig = { includeThoughts = true } end
    if next(gen) then body.generationConfig = gen end
    if json.pending(req, "tools") or (req.tools and #req.tools > 0) then
      body.tools = json.raw(tools_json(req))
      local mode = ({ auto = "AUTO", required = "ANY", none = "NONE" })[req.tool_choice or ""]
      if mode then body.toolConfig = { functionCallingConfig = { mode = mode } } end
    end
    return body
  end,

  transform_response = function(raw)
    local out = parse(json.decode(raw), nil)
    if out.reasoning then out.reasoning_content, out.reasoning = out.reasoning, nil end
    return out
  end,

  transform_stream_chunk = function(line, state)
    return parse(json.decode(line), state)
  end,
}
