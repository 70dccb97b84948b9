"""The QQ plugin: OneBot v11 over WebSocket, written against the public SDK only (docs/channels-qq.md)."""
