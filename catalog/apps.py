from django.apps import AppConfig


def cloud_settings():
    """What ``cloud`` reads at every call: the endpoint (tests: moto) and this install's id."""
    from django.conf import settings

    import cloud

    return cloud.CloudSettings(endpoint_url=settings.AWS_ENDPOINT_URL or None, install_id=settings.INSTALL_ID)


class CatalogConfig(AppConfig):
    verbose_name = "GPU catalog"
    name = "catalog"

    def ready(self) -> None:
        import cloud
        from catalog import revision

        revision.connect_receivers()
        cloud.configure(cloud_settings)  # every app talks to AWS through cloud (catalog comes first)
