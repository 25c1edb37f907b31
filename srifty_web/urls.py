"""Top-level URLs: admin, REST API v1 with its OpenAPI schema and offline Swagger UI, pages."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import URLPattern, URLResolver, include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from accounts.views import LoginView, admin_login
from srifty_web.auth_api import ObtainTokenView

api_v1: list[URLPattern | URLResolver] = [
    path("auth/token/", ObtainTokenView.as_view(), name="api-token"),
    path("", include("catalog.api_urls")),
    path("", include("profiler.api_urls")),
    path("", include("planner.app.api_urls")),
    path("", include("launcher.urls")),
]

urlpatterns = [
    # Both login pages count wrong passwords and answer a lockout with 429 (accounts.views);
    # this route comes before the admin's own login/ so that the 429 status applies there too.
    path("admin/login/", admin_login),
    path("admin/", admin.site.urls),
    path("accounts/login/", LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves Swagger UI's initialiser as a script URL, so the docs page runs under
    # the same script-src 'self' as every other page (srifty_web/security.py).
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="swagger-ui"),
    path("", include("frontend.urls")),
]
