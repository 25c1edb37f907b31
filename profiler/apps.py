from django.apps import AppConfig


class ProfilerConfig(AppConfig):
    name = "profiler"

    def ready(self) -> None:
        # Binds the background work that profiler.actions asks for by name (srifty_web.queue).
        from profiler import tasks  # noqa: F401
