-- Groq (https://api.groq.com): OpenAI-compatible under /openai/v1. Usage arrives in
-- x_groq.usage on the last stream chunk; reasoning models put their thoughts in "reasoning".
local compat = openai_compat

return {
  name = "groq",
  version = "1.0",
  endpoint = "/openai/v1/chat/completions",

  headers = function(api_key)
    return compat.bearer(api_key)
  end,

  transform_request = function(req)
    return compat.request(req, { max_tokens_field = "max_completion_tokens",
                                 strip = { reasoning_content = true, reasoning = true } })
  end,

  transform_response = function(raw)
    return compat.response(raw)
  end,

  transform_stream_chunk = function(line)
    return compat.chunk(line)
  end,
}
