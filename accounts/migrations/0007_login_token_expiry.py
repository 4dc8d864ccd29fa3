"""tok46: login tokens made before ``FAIRWAY_LOGIN_TOKEN_DAYS`` existed never expired. Each gets
the migration's instant plus that many days (not its creation plus them: an upgrade would log out
everybody whose login is older at once); personal tokens keep what their owner chose. The setting
0 leaves them as they were. Their rows are forgotten by every web process (``forget_tokens``)."""

from datetime import timedelta

from django.conf import settings
from django.db import migrations
from django.utils import timezone


def give_login_tokens_an_expiry(apps, schema_editor):
    days = settings.FAIRWAY["LOGIN_TOKEN_DAYS"]
    if not days:
        return
    AuthToken = apps.get_model("knox", "AuthToken")
    AuthToken.objects.filter(expiry__isnull=True, info__kind="login").update(
        expiry=timezone.now() + timedelta(days=days)
    )
    from accounts.auth import forget_tokens

    try:
        forget_tokens()
    except Exception:  # noqa: BLE001,S110 -- no cache at migration time: the processes start afresh
        pass


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0006_alter_user_managers"),
        ("knox", "0009_extend_authtoken_field"),
    ]

    operations = [migrations.RunPython(give_login_tokens_an_expiry, migrations.RunPython.noop)]
