-- Mistral (https://api.mistral.ai): OpenAI-like, but stricter. Only known fields are sent,
-- tool_choice "required" is called "any", and tool call ids must be 9 letters/digits.
local compat = openai_compat

local ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

-- A stable 9-character id for any id string (so calls and results still match).
local function short_id(id)
  id = tostring(id or "")
  if #id == 9 and id:match("^%w+$") then return id end
  local h1, h2 = 5381, 52711
  for i = 1, #id do
    local b = id:byte(i)
    h1 = (h1 * 33 + b) % 2147483647
    h2 = (h2 * 31 + b * 7) % 2147483629
  end
  local out = {}
  local x = h1 * 2147483629 + h2
  for i = 1, 9 do
    local k = x % 62
    out[i] = ALPHABET:sub(k + 1, k + 1)
    x = x // 62
  end
  return table.concat(out)
end

local MESSAGE_FIELDS = { role = true, content = true, name = true, tool_calls = true, tool_call_id = true, prefix = true }

-- Converted messages (JSON text), kept across requests by the message's JSON text (each
-- round of a conversation re-sends the whole history): bounded in entries and bytes.
local cache = compat.message_cache()

local function convert_one(m)
  local c = {}
  for k, v in pairs(m) do
    if MESSAGE_FIELDS[k] then c[k] = v end
  end
  if m.tool_calls then
    local calls = json.array()
    for j, tc in ipairs(m.tool_calls) do
      calls[j] = { id = short_id(tc.id), type = "function", ["function"] = tc["function"] }
    end
    c.tool_calls = calls
  end
  if m.tool_call_id then c.tool_call_id = short_id(m.tool_call_id) end
  return { json = false }, c
end

local function messages(req)
  local entries = compat.each_message(req, cache, convert_one)
  local out = {}
  for i = 1, #entries do out[i] = entries[i].json end
  return json.raw("[" .. table.concat(out, ",") .. "]")
end

return {
  name = "mistral",
  version = "1.0",
  endpoint = "/v1/chat/completions",

  headers = function(api_key)
    return compat.bearer(api_key)
  end,

  transform_request = function(req)
    local body = {
      model = req.model,
      messages = messages(req),
      stream = req.stream and true or false,
      temperature = req.temperature,
      max_tokens = req.max_tokens,
    }
    local tools = compat.tools(req) -- passed through as text while undecoded
    if tools then
      body.tools = tools
      local choice = req.tool_choice
      if choice == "required" then choice = "any" end
      body.tool_choice = choice
    end
    if type(req.extra) == "table" then
      for _, k in ipairs({ "top_p", "random_seed", "response_format", "safe_prompt", "stop", "presence_penalty",
                           "frequency_penalty", "n", "parallel_tool_calls", "prompt_mode" }) do
        if req.extra[k] ~= nil then body[k] = req.extra[k] end
      end
    end
    return body
  end,

  transform_response = function(raw)
    return compat.response(raw)
  end,

  transform_stream_chunk = function(line)
    return compat.chunk(line)
  end,
}
