"""The server: ASGI/WebSocket transport, session hosting, and following the log."""
