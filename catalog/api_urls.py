from django.urls import path
from rest_framework.routers import DefaultRouter

from catalog.api import AcceleratorViewSet, GpuSearchView, InstanceTypeViewSet, PriceListView

router = DefaultRouter()
router.register("instance-types", InstanceTypeViewSet, basename="instance-type")
router.register("accelerators", AcceleratorViewSet, basename="accelerator")

urlpatterns = [
    path("prices/", PriceListView.as_view(), name="price-list"),
    path("gpus/", GpuSearchView.as_view(), name="gpu-search-api"),
    *router.urls,
]
