from typing import Any

from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    name = "scheduler"
    verbose_name = "Scheduler"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created
        from django.db.models.signals import post_delete, post_save

        import scheduler.checks  # noqa: F401 -- registers the system checks
        from config.dbpool import purge_on_first_dead_connection
        from scheduler.models import GPU, Cluster, Host

        # A saved or deleted cluster, host or GPU whose kept fields may have changed: web processes
        # read the hardware again (scheduler.hardware_memo), by the rule the model's bulk writes
        # follow (config.memo.ForgettingQuerySet: a cluster's every field, a host's or GPU's
        # hardware fields).
        for model in (Cluster, Host, GPU):

            def saved(*, sender: Any, update_fields: Any = None, **_kw: Any) -> None:
                sender.objects.all().forget_kept(update_fields)

            def deleted(*, sender: Any, **_kw: Any) -> None:
                sender.objects.all().forget_kept(None)

            uid = f"scheduler.hardware_memo.{model.__name__}"
            post_save.connect(saved, sender=model, weak=False, dispatch_uid=f"{uid}.save")
            post_delete.connect(deleted, sender=model, weak=False, dispatch_uid=f"{uid}.delete")
        # After a PostgreSQL restart, the pool's dead connections found all at once (config/dbpool.py).
        connection_created.connect(purge_on_first_dead_connection, dispatch_uid="config.dbpool")
