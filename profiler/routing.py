"""Websocket routes of the profiler app."""

websocket_urlpatterns: list = []
