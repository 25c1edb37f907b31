"""Websocket routes of the planner app."""

from django.urls import path

from planner.app.consumers import PlanConsumer

websocket_urlpatterns = [
    path("ws/plans/<int:plan_id>/", PlanConsumer.as_asgi()),
]
