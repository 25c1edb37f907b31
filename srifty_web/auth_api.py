"""Token endpoint for scripts: POST username + password, get the API token (rate limited)."""

from drf_spectacular.utils import extend_schema
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.throttling import ScopedRateThrottle


class ObtainTokenView(ObtainAuthToken):
    """``POST /api/v1/auth/token/`` with ``username`` and ``password`` → ``{"token": ...}``.

    Throttled per client address: guessing passwords here is slow on purpose.
    """

    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "token"

    @extend_schema(operation_id="auth_token_create")
    def post(self, request, *args, **kwargs):
        return super().post(request, *args, **kwargs)
