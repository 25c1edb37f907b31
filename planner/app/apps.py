from django.apps import AppConfig


class PlannerAppConfig(AppConfig):
    """The Django side of the planner. It lives in ``planner.app`` because ``planner.perf`` is
    the pure package of performance models (compute, transfer, communication), not ORM models."""

    name = "planner.app"
    label = "plans"
    verbose_name = "Planner"

    def ready(self) -> None:
        # Binds the background solve that planner.app.solving asks for by name (srifty_web.queue).
        from planner.app import tasks  # noqa: F401
