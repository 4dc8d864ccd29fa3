from django.apps import AppConfig


class WebConfig(AppConfig):
    """The researchers' web UI: server-rendered pages over the same services as the API."""

    name = "web"
    default_auto_field = "django.db.models.BigAutoField"
