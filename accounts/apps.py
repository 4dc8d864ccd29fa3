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

        from django.contrib.auth import get_user_model
        from knox.models import AuthToken

        from accounts.auth import forget_tokens
        from accounts.models import forget_token_bulk_writes

        forget_token_bulk_writes()  # bulk writes of tokens (update, bulk_*), which send no signal

        def token_or_user_changed(**_kwargs: Any) -> None:
            forget_tokens()

        # A token created, renewed or deleted (logout, revoke, sweep, expiry, a user's deletion's
        # cascade), a user saved (deactivated, made staff) or deleted: the web processes read the
        # token rows again (accounts.auth.kept_token_rows).
        for model, name in ((AuthToken, "tokens"), (get_user_model(), "users")):
            post_save.connect(token_or_user_changed, sender=model, weak=False, dispatch_uid=f"accounts.{name}.save")
            post_delete.connect(token_or_user_changed, sender=model, weak=False, dispatch_uid=f"accounts.{name}.delete")
