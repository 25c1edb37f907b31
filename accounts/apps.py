from django.apps import AppConfig


class AccountsConfig(AppConfig):
    """Signing in: users' API tokens (stored hashed, with an expiry) and the login forms that
    count failed passwords (``srifty_web.login_guard``)."""

    name = "accounts"
    label = "accounts"
    verbose_name = "Accounts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The admin's own login view builds its form from ``login_form``: with this, a lockout
        # holds there too, even on a route that does not pass through accounts.views.
        from django.contrib import admin

        from accounts.forms import GuardedAdminAuthenticationForm

        admin.site.login_form = GuardedAdminAuthenticationForm
