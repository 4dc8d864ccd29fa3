"""``manage.py seed_demo``: the demo organisation, idempotent.

Creates (when missing) the root budget ``org``, three programs grouping the 13
virtual clusters of the Philly trace as projects ``vc-<id>``, the cluster
``philly``, and two logins. Shares are equal (1) at every level: the trace says
nothing about how the VCs were funded, so no VC is favoured. With ``--hosts N`` it
also registers N hosts whose GPUs have the fake agent's UUIDs, and prints their
tokens (or writes them to ``--tokens-out`` as JSON). Re-running creates nothing twice;
tokens of hosts that already exist are rotated so the printed ones are valid.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from accounts.models import User
from accounts.services import do_add_membership
from agent.gpu.fake import MODEL_MEMORY_MB, fake_gpu_uuid
from budgets.models import Budget
from budgets.services import do_create_budget
from scheduler.models import Host
from scheduler.scenarios.spec import cluster_size_problem
from scheduler.services import HostError, do_create_cluster, do_register_host, do_rotate_host_token

ROOT = "org"
PROGRAMS: dict[str, list[str]] = {
    "large": ["6214e9", "11cb48", "6c71a0"],
    "medium": ["b436b2", "ee9e8c", "103959", "0e4a51"],
    "small": ["unknown", "7f04ca", "ed69ec", "2869ce", "e13805", "51b7ef"],
}
"""Program → Philly virtual cluster ids (projects are named ``vc-<id>``)."""

LOGINS = [
    # username, password, superuser; the demo logins are documented in docs/demo.md
    ("admin", "fairway-admin", True),
    ("researcher", "fairway-demo", False),
]


def _live_child(parent: Budget | None, name: str) -> Budget | None:
    return Budget.objects.filter(parent=parent, name=name, archived_at__isnull=True).first()


class Command(BaseCommand):
    help = "Create the demo organisation (budgets, cluster 'philly', logins); safe to run again."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", default="philly", help="cluster name (default: philly)")
        parser.add_argument("--hosts", type=int, default=0, help="pre-register N hosts and print their tokens")
        parser.add_argument("--gpus", type=int, default=8, help="GPUs per pre-registered host (default: 8)")
        parser.add_argument("--gpu-model", default="H100", help="GPU model of those hosts (default: H100)")
        parser.add_argument("--host-prefix", default="", help="host name prefix (default: '<cluster>-')")
        parser.add_argument("--tokens-out", type=Path, help="write {host: token} as JSON here instead of printing")
        parser.add_argument("--reset-passwords", action="store_true", help="reset the demo logins' passwords")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["hosts"] < 0 or options["gpus"] < 1:
            raise CommandError("--hosts must be >= 0 and --gpus >= 1")
        # A scenario file's bounds of a cluster, as simulate's: past them the hosts' GPU lists were
        # built until memory ran out (left47)
        if too_big := cluster_size_problem(("--hosts", options["hosts"]), ("--gpus", options["gpus"])):
            raise CommandError(too_big)
        with transaction.atomic():
            root = self._budgets()
            cluster = do_create_cluster(options["cluster"], "demo cluster (Philly trace)")
            logins = self._logins(root, reset=options["reset_passwords"])
            tokens = self._hosts(cluster, options)

        self.stdout.write(f"cluster {cluster.name}: {cluster.hosts.filter(removed_at__isnull=True).count()} hosts")
        for username, password, note in logins:
            self.stdout.write(f"login {username} / {password}{note}")
        if tokens:
            if options["tokens_out"]:
                path: Path = options["tokens_out"]
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(tokens, indent=2) + "\n")
                path.chmod(0o600)
                self.stdout.write(f"host tokens of {len(tokens)} hosts written to {path}")
            else:
                for name, token in tokens.items():
                    self.stdout.write(f"host {name} token {token}")

    def _budgets(self) -> Budget:
        other = Budget.objects.filter(parent=None).exclude(name=ROOT, archived_at__isnull=True).first()
        if other is not None:
            # The tree has one root (docs/deploy.md, "First start"): the demo's ``org`` cannot sit
            # beside a lab's own organisation, and moving the lab under it is not the demo's call.
            # A traceback ending in the admin's words ("choose a parent under it") before (try44).
            raise CommandError(
                f"this database already holds an organisation, {other.name!r} (its root budget); seed_demo "
                f"makes the demo organisation {ROOT!r} (with its cluster and logins), which would be a "
                "second root: run it on an empty database (another DATABASE_URL, or FAIRWAY_VAR_DIR for "
                "SQLite) and set up the lab's own budgets in the admin. Nothing was changed."
            )
        root = _live_child(None, ROOT) or do_create_budget(name=ROOT, parent=None, description="the organisation")
        created = 0
        for program, vcs in PROGRAMS.items():
            node = _live_child(root, program)
            if node is None:
                node = do_create_budget(name=program, parent=root, description=f"Philly VCs: {', '.join(vcs)}")
                created += 1
            for vc in vcs:
                if _live_child(node, f"vc-{vc}") is None:
                    do_create_budget(name=f"vc-{vc}", parent=node, description=f"Philly virtual cluster {vc}")
                    created += 1
        self.stdout.write(f"budgets: {created} created under {ROOT} (equal shares)")
        return root

    def _logins(self, root: Budget, *, reset: bool) -> list[tuple[str, str, str]]:
        shown = []
        for username, password, superuser in LOGINS:
            user = User.objects.filter(username=username).first()
            note = ""
            if user is None:
                user = User.objects.create_user(username=username, password=password)
            elif reset:
                user.set_password(password)
                user.save(update_fields=["password"])
            else:
                note = " (existing user: password unchanged unless --reset-passwords)"
            if superuser and not (user.is_staff and user.is_superuser):
                user.is_staff = user.is_superuser = True
                user.save(update_fields=["is_staff", "is_superuser"])
            if not superuser:
                do_add_membership(user, root)  # member of the root: may submit to every project
            shown.append((username, password, note))
        return shown

    def _hosts(self, cluster: Any, options: dict[str, Any]) -> dict[str, str]:
        prefix = options["host_prefix"] or f"{cluster.name}-"
        model = options["gpu_model"]
        memory = MODEL_MEMORY_MB.get(model, 81559)
        tokens: dict[str, str] = {}
        for i in range(1, options["hosts"] + 1):
            name = f"{prefix}{i:03d}"
            existing = Host.objects.filter(name=name).first()
            if existing is not None:
                if existing.cluster_id != cluster.pk:
                    raise CommandError(f"host {name} exists in another cluster")
                try:
                    tokens[name] = do_rotate_host_token(None, existing)
                except HostError as exc:  # a removed host's (brk44): its token is refused for good
                    raise CommandError(f"host {name}: {exc.message}") from None
                continue
            gpus = [(g, fake_gpu_uuid(name, g), model, memory) for g in range(options["gpus"])]
            _host, tokens[name] = do_register_host(cluster, name, gpus, {"rack": f"r{(i - 1) // 4 + 1}"})
        return tokens
