from django.apps import AppConfig


class LauncherConfig(AppConfig):
    """Training jobs on EC2: launch a plan option, watch it, react to spot interruptions and
    drift, offer a re-plan, take it down, and reconcile what EC2 still runs."""

    name = "launcher"
    label = "launcher"
    verbose_name = "Launcher"

    def ready(self) -> None:
        # Binds the background work that launcher.jobs asks for by name (srifty_web.queue).
        from launcher import tasks  # noqa: F401
