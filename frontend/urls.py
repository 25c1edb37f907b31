from django.urls import path

from frontend import gpus, jobs, plans, profiling, views

urlpatterns = [
    path("", views.home, name="home"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("catalog/", views.catalog, name="catalog"),
    path("catalog/gpus/", gpus.gpu_search, name="gpu-search"),
    path("profiling/", profiling.runs, name="profiling"),
    path("profiling/<int:run_id>/", profiling.run_detail, name="profiling-run"),
    path("profiling/<int:run_id>/cancel/", profiling.cancel, name="profiling-run-cancel-page"),
    path("plans/", plans.plan_list, name="plans"),
    path("plans/<int:plan_id>/", plans.plan_detail, name="plan-page"),
    path("plans/<int:plan_id>/cancel/", plans.plan_cancel, name="plan-cancel-page"),
    path("jobs/", jobs.job_list, name="jobs"),
    path("jobs/new/", jobs.job_new, name="job-new"),
    path("jobs/<int:job_id>/", jobs.job_detail, name="job-page"),
    path("jobs/<int:job_id>/stop/", jobs.job_stop, name="job-stop-page"),
    path("jobs/<int:job_id>/replan/", jobs.job_replan, name="job-replan-page"),
    path("jobs/<int:job_id>/replan/apply/", jobs.job_replan_apply, name="job-replan-apply-page"),
]
