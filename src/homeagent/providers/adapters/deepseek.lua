-- DeepSeek (https://api.deepseek.com): OpenAI-compatible, with reasoning_content and
-- prompt_cache_hit_tokens / prompt_cache_miss_tokens in usage.
local compat = openai_compat

return {
  name = "deepseek",
  version = "1.0",
  endpoint = "/chat/completions",

  headers = function(api_key)
    return compat.bearer(api_key)
  end,

  transform_request = function(req)
    -- reasoning_content is sent back only inside the current tool loop (after the last
    -- user message) and only when thinking is on; DeepSeek rejects or ignores it elsewhere.
    local text = json.pending(req, "messages")
    if not (text and not text:find('"reasoning_content"', 1, true)) then
      local messages = req.messages
      local last_user = compat.last_user_index(messages)
      local out = json.array()
      for i, m in ipairs(messages) do
        if m.reasoning_content ~= nil and not (req.thinking and i > last_user and m.tool_calls) then
          local c = {}
          for k, v in pairs(m) do if k ~= "reasoning_content" then c[k] = v end end
          out[i] = c
        else
          out[i] = m
        end
      end
      req.messages = out
    end
    local body = compat.request(req, { stream_usage = true, strip = {} })
    if req.thinking then body.thinking = { type = "enabled" } end
    return body
  end,

  transform_response = function(raw)
    local r = compat.response(raw)
    -- usage passes through raw: prompt_cache_hit_tokens becomes cache_read,
    -- completion_tokens_details.reasoning_tokens becomes reasoning.
    return r
  end,

  transform_stream_chunk = function(line)
    return compat.chunk(line)
  end,
}
