from django.apps import AppConfig


class ProfilerConfig(AppConfig):
    name = "profiler"
