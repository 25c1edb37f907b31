"""Websocket routes of training jobs."""

from django.urls import path

from launcher.consumers import JobConsumer

websocket_urlpatterns = [
    path("ws/jobs/<int:job_id>/", JobConsumer.as_asgi()),
]
