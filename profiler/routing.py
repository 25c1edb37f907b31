"""Websocket routes of the profiler app."""

from django.urls import path

from profiler.consumers import RunConsumer

websocket_urlpatterns = [
    path("ws/profiling-runs/<int:run_id>/", RunConsumer.as_asgi()),
]
