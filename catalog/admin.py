"""Django admin for the catalog: search/filter, current prices, refresh from AWS, CSV upload.

Price rows are history: admins may add an observation but never change or delete one.
"""

from __future__ import annotations

from typing import cast

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path

from catalog.forms import CatalogUploadForm
from catalog.importer import CatalogImportError, import_catalog
from catalog.models import (
    Accelerator,
    AvailabilityZone,
    InstanceOffering,
    InstanceType,
    InstanceTypeQuerySet,
    OnDemandPrice,
    PriceSource,
    Region,
    SpotInterruption,
    SpotPrice,
)
from catalog.tasks import refresh_prices_task


@admin.register(Accelerator)
class AcceleratorAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "kind",
        "manufacturer",
        "memory_mib",
        "fp16_tflops",
        "memory_bandwidth_gbs",
        "spec_confidence",
    ]
    list_filter = ["kind", "manufacturer"]
    search_fields = ["name", "manufacturer", "architecture"]


class RegionListFilter(admin.SimpleListFilter):
    title = "region"
    parameter_name = "region"

    def lookups(self, request, model_admin):
        return [(r, r) for r in Region.objects.values_list("code", flat=True)]

    def queryset(self, request, queryset):
        if self.value():
            return queryset.filter(offerings__zone__region__code=self.value()).distinct()
        return queryset


@admin.register(InstanceType)
class InstanceTypeAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "family",
        "accelerator",
        "gpu_count",
        "vcpus",
        "memory_gib",
        "baseline_gbps",
        "efa_supported",
        "on_demand",
        "spot",
    ]
    list_filter = ["accelerator__kind", "accelerator", "efa_supported", RegionListFilter, "family"]
    search_fields = ["name", "family", "accelerator__name"]
    list_select_related = ["accelerator"]
    actions = ["refresh_from_aws"]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        # (the admin types its queryset as a plain QuerySet; the model's manager makes ours)
        return cast(InstanceTypeQuerySet, super().get_queryset(request)).with_current_prices()

    @admin.display(description="on-demand $/h (cheapest region)", ordering="on_demand_usd")
    def on_demand(self, obj) -> str:
        return f"{obj.on_demand_usd:.4f}" if obj.on_demand_usd is not None else "—"

    @admin.display(description="spot $/h (cheapest zone)", ordering="spot_usd")
    def spot(self, obj) -> str:
        return f"{obj.spot_usd:.4f}" if obj.spot_usd is not None else "—"

    @admin.action(description="Refresh prices from AWS (background task per region)", permissions=["change"])
    def refresh_from_aws(self, request: HttpRequest, queryset: QuerySet) -> None:
        names = list(queryset.values_list("name", flat=True))
        regions = sorted(
            set(
                InstanceOffering.objects.filter(instance_type__in=queryset).values_list(
                    "zone__region__code", flat=True
                )
            )
        )
        for region in regions:
            refresh_prices_task.enqueue(region, names)
        self.message_user(
            request,
            f"Queued a refresh of {len(names)} type(s) in {len(regions)} region(s).",
            messages.SUCCESS,
        )

    def get_urls(self):
        custom = [
            path("import-csv/", self.admin_site.admin_view(self.import_csv_view), name="catalog_import_csv")
        ]
        return custom + super().get_urls()

    def import_csv_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_change_permission(request):
            raise PermissionDenied
        form = CatalogUploadForm(request.POST or None, request.FILES or None)
        errors: list[str] = []
        if request.method == "POST" and form.is_valid():
            try:
                report = import_catalog(
                    form.cleaned_data["instances"],
                    network=request.FILES.get("network"),
                    source=PriceSource.CSV,
                    observed_at=form.cleaned_data.get("observed_at"),
                )
            except CatalogImportError as exc:
                shown = 100  # a file of 200,000 bad rows must not become a page of 200,000 items
                errors = exc.errors[:shown] + (
                    [f"... and {len(exc.errors) - shown} more"] if len(exc.errors) > shown else []
                )
                self.message_user(request, f"Nothing imported: {len(exc.errors)} error(s).", messages.ERROR)
            else:
                self.message_user(request, f"Imported: {report.summary()}", messages.SUCCESS)
                return redirect("admin:catalog_instancetype_changelist")
        context = {
            **self.admin_site.each_context(request),
            "form": form,
            "errors": errors,
            "title": "Import catalog CSV",
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/catalog/import_csv.html", context)


class _HistoryAdmin(admin.ModelAdmin):
    """Observations are added, never edited or deleted, so that history is kept."""

    date_hierarchy = "observed_at"
    list_filter = ["source"]

    def has_change_permission(self, request, obj=None) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def save_model(self, request, obj, form, change) -> None:
        obj.source = PriceSource.ADMIN
        super().save_model(request, obj, form, change)


@admin.register(OnDemandPrice)
class OnDemandPriceAdmin(_HistoryAdmin):
    list_display = ["instance_type", "region", "usd_per_hour", "observed_at", "source"]
    list_filter = ["source", "region"]
    search_fields = ["instance_type__name", "region__code"]
    autocomplete_fields = ["instance_type"]
    fields = ["instance_type", "region", "usd_per_hour", "observed_at"]


@admin.register(SpotPrice)
class SpotPriceAdmin(_HistoryAdmin):
    list_display = ["instance_type", "zone", "usd_per_hour", "observed_at", "source"]
    list_filter = ["source", "zone__region"]
    search_fields = ["instance_type__name", "zone__zone_id"]
    autocomplete_fields = ["instance_type"]
    fields = ["instance_type", "zone", "usd_per_hour", "observed_at"]


@admin.register(SpotInterruption)
class SpotInterruptionAdmin(admin.ModelAdmin):
    list_display = ["instance_type", "region", "bucket", "savings_pct", "source", "note", "updated_at"]
    list_editable = ["bucket"]
    list_filter = ["bucket", "source", "region"]
    search_fields = ["instance_type__name"]
    autocomplete_fields = ["instance_type"]
    readonly_fields = ["source"]

    def save_model(self, request, obj, form, change):
        # An admin's value wins over later Spot Advisor imports.
        obj.source = "admin"
        super().save_model(request, obj, form, change)


@admin.register(Region)
class RegionAdmin(admin.ModelAdmin):
    search_fields = ["code"]


@admin.register(AvailabilityZone)
class AvailabilityZoneAdmin(admin.ModelAdmin):
    list_display = ["zone_id", "region"]
    list_filter = ["region"]
    search_fields = ["zone_id"]
