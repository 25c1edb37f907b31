from django.apps import AppConfig


class CatalogConfig(AppConfig):
    verbose_name = "GPU catalog"
    name = "catalog"

    def ready(self) -> None:
        from catalog import revision

        revision.connect_receivers()
