from typing import Any

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from accounts.models import Membership
        from budgets.tree_memo import forget

        def membership_changed(**_kwargs: Any) -> None:
            forget()

        # A saved or deleted membership (a user's or a budget's deletion cascades through these
        # signals): the web processes read memberships again (budgets.tree_memo).
        post_save.connect(membership_changed, sender=Membership, weak=False, dispatch_uid="accounts.memberships.save")
        post_delete.connect(
            membership_changed, sender=Membership, weak=False, dispatch_uid="accounts.memberships.delete"
        )
