-- Kimi / Moonshot (https://api.moonshot.cn or https://api.moonshot.ai): OpenAI-compatible.
-- Like the original kimicode adapter: disable_thinking, extra_body and per-message
-- reasoning_content are stripped; reasoning_content and tool_calls are parsed.
local compat = openai_compat

return {
  name = "kimi",
  version = "1.0",
  endpoint = "/v1/chat/completions",

  headers = function(api_key)
    return compat.bearer(api_key)
  end,

  transform_request = function(req)
    return compat.request(req, {
      stream_usage = true,
      strip = { reasoning_content = true },
      drop_extra = { disable_thinking = true, extra_body = true },
    })
  end,

  transform_response = function(raw)
    return compat.response(raw)
  end,

  transform_stream_chunk = function(line)
    if line == "[DONE]" then return { done = true } end
    local r = json.decode(line)
    local out = compat.chunk_doc(r)
    -- Moonshot reports usage inside the final choice ("choices[0].usage") when streaming
    if not out.usage and r.choices and r.choices[1] then out.usage = r.choices[1].usage end
    return out
  end,
}
