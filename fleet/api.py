"""The rendezvous endpoint a cluster's nodes poll, once for training jobs and profiling runs.

``GET /api/v1/jobs/{id}/rendezvous/?instance_id=...`` (``launcher.api``) and
``GET /api/v1/profiling-runs/{id}/rendezvous/?instance_id=...`` (``profiler.api``) are this view
with their own token authentication and their own record: a subclass says who may ask and
answers with ``answer`` (``fleet.rendezvous.decide`` over its job or run).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView


class RendezvousView(APIView):
    """Master discovery for a cluster's nodes (Bearer token of the job or run): 200 go (rank 0's
    private IP, this node's rank; a job's node also gets its environment), 202 wait, 4xx stop."""

    def answer(self, request: Request, pk: int, instance_id: str) -> tuple[int, dict[str, Any]]:
        """(HTTP status, body) for ``instance_id``'s poll; each endpoint says it."""
        raise NotImplementedError

    @extend_schema(
        parameters=[OpenApiParameter("instance_id", str, required=True)],
        responses={
            200: OpenApiResponse(description='{"master_addr", "node_rank", "nnodes"} (a job adds "env")'),
            202: None,
            400: None,
            403: None,
            404: None,
            410: None,
        },
    )
    def get(self, request: Request, pk: int) -> Response:
        code, body = self.answer(request, pk, request.query_params.get("instance_id", "").strip())
        return Response(body, status=code)
