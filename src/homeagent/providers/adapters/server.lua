-- An OpenAI-compatible gateway (llmsproxy / "zen-compatible" servers). Keeps disable_thinking
-- (derived from the request's thinking flag unless given in extra) and drops extra_body. Usage
-- passes through raw: the host reads OpenAI, DeepSeek and gateway shapes alike.
local compat = openai_compat

return {
  name = "server",
  version = "1.0",
  endpoint = "/chat/completions",

  headers = function(api_key)
    return compat.bearer(api_key)
  end,

  transform_request = function(req)
    local body = compat.request(req, { stream_usage = true, strip = {}, drop_extra = { extra_body = true } })
    if body.disable_thinking == nil then body.disable_thinking = not req.thinking end
    return body
  end,

  transform_response = function(raw)
    return compat.response(raw)
  end,

  transform_stream_chunk = function(line)
    return compat.chunk(line)
  end,
}
