from django.apps import AppConfig


class ProfilerConfig(AppConfig):
    name = "profiler"

    def ready(self) -> None:
        # Binds the background work that profiler.actions asks for by name (srifty_web.queue).
        from planner.app.ports import register_profile_store
        from profiler import tasks  # noqa: F401
        from profiler.planning import ProfilerStore

        # The planner's app reads profiling runs through its port (planner.app.ports), never
        # through this app's models: it is served here.
        register_profile_store(ProfilerStore())
