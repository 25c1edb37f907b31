"""API routes of training jobs (included under /api/v1/)."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from launcher.api import (
    JobAgentTarballView,
    JobCheckpointsView,
    JobReportsView,
    JobSpotNoticeView,
    JobViewSet,
    JobWorkdirView,
    RendezvousView,
)

router = DefaultRouter()
router.register("jobs", JobViewSet, basename="job")

urlpatterns = [
    path("jobs/<int:pk>/reports/", JobReportsView.as_view(), name="job-reports"),
    path("jobs/<int:pk>/checkpoints/", JobCheckpointsView.as_view(), name="job-checkpoints"),
    path("jobs/<int:pk>/interruptions/", JobSpotNoticeView.as_view(), name="job-interruptions"),
    path("jobs/<int:pk>/rendezvous/", RendezvousView.as_view(), name="job-rendezvous"),
    path("jobs/<int:pk>/agent.tar.gz", JobAgentTarballView.as_view(), name="job-agent-tarball"),
    path("jobs/<int:pk>/workdir.tar.gz", JobWorkdirView.as_view(), name="job-workdir-tarball"),
    *router.urls,
]
