"""API tokens in the admin: listed and revocable (deleted); never created or shown here, since
only a key's hash is stored."""

from django.contrib import admin

from accounts.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("user", "created_at", "token_expires_at")
    list_select_related = ("user",)
    search_fields = ("user__username",)
    fields = ("user", "created_at", "token_expires_at")
    readonly_fields = fields

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
