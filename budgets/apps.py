from typing import Any

from django.apps import AppConfig


class BudgetsConfig(AppConfig):
    name = "budgets"
    verbose_name = "Budgets"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from budgets.models import Budget
        from budgets.tree_memo import forget

        def budget_changed(**_kwargs: Any) -> None:
            forget()

        # A saved or deleted budget: the web processes reload the tree (budgets.tree_memo).
        post_save.connect(budget_changed, sender=Budget, weak=False, dispatch_uid="budgets.tree_memo.save")
        post_delete.connect(budget_changed, sender=Budget, weak=False, dispatch_uid="budgets.tree_memo.delete")
