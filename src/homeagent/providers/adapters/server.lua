-- An OpenAI-compatible gateway (llmsproxy / "zen-compatible" servers). Keeps disable_thinking
-- (derived from the request's thinking flag unless given in extra), drops extra_body, and
-- normalises usage from any of the common shapes.
local compat = openai_compat

local function int(v) return type(v) == "number" and math.floor(v) or nil end

-- {prompt, completion, total, cache_read, reasoning} from OpenAI, DeepSeek or gateway usage.
local function usage(u)
  if type(u) ~= "table" then return nil end
  local details = type(u.prompt_tokens_details) == "table" and u.prompt_tokens_details or {}
  local cdetails = type(u.completion_tokens_details) == "table" and u.completion_tokens_details or {}
  local prompt = int(u.prompt_tokens) or int(u.input_tokens) or 0
  local completion = int(u.completion_tokens) or int(u.output_tokens) or 0
  return {
    prompt = prompt,
    completion = completion,
    total = int(u.total_tokens) or (prompt + completion),
    cache_read = int(details.cached_tokens) or int(u.prompt_cache_hit_tokens) or int(u.cache_read_input_tokens) or 0,
    reasoning = int(cdetails.reasoning_tokens) or int(u.reasoning_tokens) or 0,
  }
end

return {
  name = "server",
  version = "1.0",
  endpoint = "/chat/completions",
  -- plain delta chunks are parsed by the host; the rest by transform_stream_chunk below
  stream_format = "openai",

  headers = function(api_key)
    return compat.bearer(api_key)
  end,

  transform_request = function(req)
    local body = compat.request(req, { stream_usage = true, strip = {}, drop_extra = { extra_body = true } })
    if body.disable_thinking == nil then body.disable_thinking = not req.thinking end
    return body
  end,

  transform_response = function(raw)
    local out = compat.response(raw)
    out.usage = usage(out.usage)
    return out
  end,

  transform_stream_chunk = function(line)
    local out = compat.chunk(line)
    if out.usage then out.usage = usage(out.usage) end
    return out
  end,
}
