from django.apps import AppConfig


class CatalogConfig(AppConfig):
    verbose_name = "GPU catalog"
    name = "catalog"
