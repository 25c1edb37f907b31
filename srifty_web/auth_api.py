"""Token endpoint for scripts: POST username + password, get a new API token (rate limited).

Two limits: DRF's ``token`` throttle (``TOKEN_THROTTLE_RATE`` requests a minute per client
address) and the sign-in lockout every login shares (``srifty_web.login_guard``: failures per
username and per address). Both key on the real client address, never on a header the client
writes (``login_guard.client_address``).
"""

from __future__ import annotations

from django.contrib.auth import authenticate
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from accounts.tokens import issue_api_token
from srifty_web import login_guard


class TokenRequestSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, trim_whitespace=False, style={"input_type": "password"})


class TokenSerializer(serializers.Serializer):
    token = serializers.CharField(
        help_text="The API key: shown once, send it as `Authorization: Token <key>`"
    )
    expires_at = serializers.DateTimeField()


class PeerRateThrottle(ScopedRateThrottle):
    """The scoped throttle, keyed by the client address the login guard uses."""

    def get_ident(self, request) -> str:
        return login_guard.client_address(request)


class LockedOut(exceptions.Throttled):
    """429 with ``Retry-After`` and the lockout's message."""

    def __init__(self, lockout: login_guard.Lockout):
        super().__init__(wait=lockout.retry_after_s, detail=lockout.message)


class ObtainTokenView(APIView):
    """``POST /api/v1/auth/token/`` with ``username`` and ``password`` → ``{"token", "expires_at"}``.

    Each call issues a new token (only its hash is kept, so an earlier key cannot be shown
    again); earlier tokens stay valid until they expire. Throttled per client address, and
    locked out per username and address after repeated wrong passwords.
    """

    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_classes = [PeerRateThrottle]
    throttle_scope = "token"

    @extend_schema(
        operation_id="auth_token_create",
        request=TokenRequestSerializer,
        responses={
            200: TokenSerializer,
            400: OpenApiResponse(description="Missing fields, or a wrong username or password"),
            429: OpenApiResponse(description="Too many requests or failed sign-ins; see Retry-After"),
        },
    )
    def post(self, request, *args, **kwargs):
        given = TokenRequestSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        username, password = given.validated_data["username"], given.validated_data["password"]
        address = login_guard.client_address(request)
        lockout = login_guard.lockout(username, address)
        if lockout is not None:
            raise LockedOut(lockout)
        user = authenticate(request=request._request, username=username, password=password)
        if user is None:
            lockout = login_guard.record_failure(username, address)
            if lockout is not None:
                raise LockedOut(lockout)
            raise serializers.ValidationError(
                {"non_field_errors": ["Unable to log in with provided credentials."]}, code="authorization"
            )
        login_guard.record_success(username)
        issued = issue_api_token(user)
        return Response(TokenSerializer({"token": issued.key, "expires_at": issued.expires_at}).data)
