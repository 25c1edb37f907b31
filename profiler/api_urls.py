from django.urls import path
from rest_framework.routers import DefaultRouter

from profiler.api import AgentEventView, AgentTarballView, ProfilingRunViewSet, RendezvousView

router = DefaultRouter()
router.register("profiling-runs", ProfilingRunViewSet, basename="profiling-run")

urlpatterns = [
    path("profiling-runs/<int:pk>/events/", AgentEventView.as_view(), name="agent-events"),
    path("profiling-runs/<int:pk>/rendezvous/", RendezvousView.as_view(), name="agent-rendezvous"),
    path("agent.tar.gz", AgentTarballView.as_view(), name="agent-tarball"),
    *router.urls,
]
