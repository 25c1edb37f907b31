"""The login forms (site and admin), with failed passwords counted by ``srifty_web.login_guard``."""

from __future__ import annotations

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm

from srifty_web import login_guard

LOCKED_OUT = "locked_out"  # the error code a view turns into a 429 (accounts.views)


class GuardedAuthenticationForm(AuthenticationForm):
    """Refuses a sign-in while its username or address is locked out, before the password is
    checked; counts a wrong password; forgives the username's failures on a success.

    A password that is right for an account the form then refuses (inactive, or not staff on the
    admin's form) is not a wrong password and is not counted; it does not forgive either."""

    lockout: login_guard.Lockout | None = None

    def clean(self):
        username = self.cleaned_data.get("username")
        password = self.cleaned_data.get("password")
        if not username or not password:
            return super().clean()
        address = login_guard.client_address(self.request) if self.request is not None else "unknown"
        self.lockout = login_guard.lockout(username, address)
        if self.lockout is None:
            try:
                cleaned = super().clean()
            except forms.ValidationError:
                if self.get_user() is not None:
                    raise
                self.lockout = login_guard.record_failure(username, address)
                if self.lockout is None:
                    raise
            else:
                login_guard.record_success(username)
                return cleaned
        raise forms.ValidationError(self.lockout.message, code=LOCKED_OUT)


class GuardedAdminAuthenticationForm(GuardedAuthenticationForm, AdminAuthenticationForm):
    """The admin's form (staff accounts only), guarded the same way."""
