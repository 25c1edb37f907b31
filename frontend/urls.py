from django.urls import path

from frontend import profiling, views

urlpatterns = [
    path("", views.home, name="home"),
    path("catalog/", views.catalog, name="catalog"),
    path("profiling/", profiling.runs, name="profiling"),
    path("profiling/<int:run_id>/", profiling.run_detail, name="profiling-run"),
    path("profiling/<int:run_id>/cancel/", profiling.cancel, name="profiling-run-cancel-page"),
]
