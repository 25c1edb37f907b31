from rest_framework.routers import DefaultRouter

from planner.app.api import PlanViewSet

router = DefaultRouter()
router.register("plans", PlanViewSet, basename="plan")

urlpatterns = router.urls
