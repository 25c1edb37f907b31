from django.apps import AppConfig


class FrontendConfig(AppConfig):
    name = "frontend"

    def ready(self):
        from srifty_web import checks  # noqa: F401  (registers the srifty.* system checks)
