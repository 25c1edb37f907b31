"""Websocket routes of all apps, collected in one place."""

from launcher.routing import websocket_urlpatterns as jobs_ws
from planner.app.routing import websocket_urlpatterns as plans_ws
from profiler.routing import websocket_urlpatterns as profiler_ws

websocket_urlpatterns = [*profiler_ws, *jobs_ws, *plans_ws]
