"""tryout48: a lab moving from Slurm ran README's ``import_history sacct usage.txt --cluster h100``
and was told ``line 2 (job 101): no user 'bob'`` for every job: the export's users are Slurm's, and
nothing said that each needs a Fairway user of that name first (with single sign-on, one is made
at the person's first login). The bad line says what to do."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone


def test_a_slurm_user_without_a_fairway_user_says_how_to_make_one(cluster, researcher, org_tree, tmp_path):
    now = timezone.now()
    s, e = ((now - timedelta(hours=h)).strftime("%Y-%m-%dT%H:%M:%S") for h in (3, 1))
    f = tmp_path / "usage.txt"
    f.write_text(f"JobID|User|Account|AllocTRES|Start|End|State\n101|bob|olmo|gres/gpu=2|{s}|{e}|COMPLETED\n")

    with pytest.raises(CommandError) as err:
        call_command("import_history", "sacct", str(f), "--cluster", "default", stdout=StringIO())

    assert (
        "line 2 (job 101): no user 'bob': each Slurm User needs a Fairway user of that name "
        "(admin → Users → Add, or their first single sign-on login)"
    ) in str(err.value)
