"""The web UI and HTTP API (Starlette + uvicorn in the daemon's event loop). See docs/webui.md."""

from homeagent.webui.server import WebUIError, WebUIServer, new_token_message, start_webui, token_message

__all__ = ["WebUIError", "WebUIServer", "new_token_message", "start_webui", "token_message"]
