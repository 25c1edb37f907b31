"""The two login pages: a locked-out sign-in is answered 429 with ``Retry-After``, the form
showing why (``accounts.forms``)."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse

from accounts.forms import GuardedAuthenticationForm


def _locked_out_status(response: HttpResponse) -> HttpResponse:
    """429 + Retry-After when the page's form was refused by a lockout; else as it was."""
    context = getattr(response, "context_data", None) or {}
    lockout = getattr(context.get("form"), "lockout", None)
    if lockout is not None:
        response.status_code = 429
        response["Retry-After"] = str(lockout.retry_after_s)
    return response


class LoginView(auth_views.LoginView):
    """``/accounts/login/``."""

    authentication_form = GuardedAuthenticationForm

    def form_invalid(self, form):
        return _locked_out_status(super().form_invalid(form))


def admin_login(request: HttpRequest) -> HttpResponse:
    """``/admin/login/``: the admin's own view (its form is guarded, see ``AccountsConfig``)."""
    return _locked_out_status(admin.site.login(request))
