from typing import Any

from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    name = "scheduler"
    verbose_name = "Scheduler"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from scheduler.hardware_memo import forget_if
        from scheduler.models import GPU, Cluster, Host

        # A saved or deleted host or GPU whose hardware fields may have changed: web processes
        # read the hardware again (scheduler.hardware_memo).
        for model in (Host, GPU):
            fields = model.objects.all().hardware_fields

            def saved(*, update_fields: Any = None, _fields: frozenset[str] = fields, **_kw: Any) -> None:
                forget_if(update_fields, _fields)

            def deleted(*, _fields: frozenset[str] = fields, **_kw: Any) -> None:
                forget_if(None, _fields)

            uid = f"scheduler.hardware_memo.{model.__name__}"
            post_save.connect(saved, sender=model, weak=False, dispatch_uid=f"{uid}.save")
            post_delete.connect(deleted, sender=model, weak=False, dispatch_uid=f"{uid}.delete")

        def cluster_changed(**_kw: Any) -> None:  # the kept clusters: every field
            forget_if(None, frozenset())

        post_save.connect(
            cluster_changed, sender=Cluster, weak=False, dispatch_uid="scheduler.hardware_memo.Cluster.save"
        )
        post_delete.connect(
            cluster_changed, sender=Cluster, weak=False, dispatch_uid="scheduler.hardware_memo.Cluster.delete"
        )
