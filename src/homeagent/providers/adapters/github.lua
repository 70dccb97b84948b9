-- GitHub Models (https://models.github.ai/inference): OpenAI-compatible, a personal
-- access token with the "models" scope as the Bearer key.
local compat = openai_compat

return {
  name = "github",
  version = "1.0",
  endpoint = "/chat/completions",

  headers = function(api_key)
    return { Authorization = "Bearer " .. api_key, Accept = "application/json" }
  end,

  transform_request = function(req)
    return compat.request(req, {})
  end,

  transform_response = function(raw)
    return compat.response(raw)
  end,

  transform_stream_chunk = function(line)
    return compat.chunk(line)
  end,
}
