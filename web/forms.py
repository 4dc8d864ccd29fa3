"""Forms of the web UI. Parsing only: every rule about submissions lives in
``scheduler.services.do_submit_workload``, whose field errors the submit page shows inline."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

import yaml
from django import forms
from django.conf import settings
from django.core.validators import MaxValueValidator

from agent.protocol import MAX_MESSAGE_BYTES
from config.errors import ServiceError
from config.parsers import find_unencodable
from fairway_cli.numbers import PLAIN_INT, duration_text
from fairway_cli.words import RETRIES_WORDS
from fairway_common import strict_yaml
from scheduler.api.serializers import WorkloadQuoteSerializer, WorkloadSubmitSerializer, default_name
from scheduler.jobspec import retries_problem
from scheduler.notifications import KIND_LABELS, webhook_problem, webhook_without_url
from scheduler.services import CPUS_PROBLEM, GPU_COUNT_PROBLEM, MAX_CPUS
from scheduler.sizes import exact_size_text

ENV_HELP = "One NAME=value per line."


def _env_lines(text: str, field: str, secret: bool) -> tuple[dict[str, Any], list[str]]:
    env: dict[str, Any] = {}
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            problems.append(f"Line {number}: write NAME=value.")
            continue
        if name.strip() in env:  # the earlier value was dropped without a word
            problems.append(f"Line {number}: {name.strip()} is already set above.")
            continue
        env[name.strip()] = {"value": value, "secret": secret}
    return env, problems


def env_line_holds(name: str, value: str) -> bool:
    """Whether the form's env line ``NAME=value`` reads back as ``value`` (a line break of any kind
    splits it, blanks at its end are dropped): "Submit again" names the values it cannot hold."""
    env, problems = _env_lines(f"{name}={value}", "env", secret=False)
    return not problems and env == {name: {"value": value, "secret": False}}


GPU_MODEL_DEFAULT = "the cluster's only model (name one where it has several)"
"""The GPU model's blank choice, as the API's ``gpu_model`` and ``fairway submit -m`` word it."""


# One statement each of what the submit form and the change form say of a field (try63: "Per
# host. Empty: per-GPU share." there, "empty: the host's per-GPU share" here).
MIN_RUNTIME_HELP = "Seconds or a duration like 2h30m. 0 = unallocated."
MAX_RUNTIME_HELP = "Optional, e.g. 12h: the attempt is stopped then (at least the minimum runtime). Empty: none."
CPUS_HELP = "Per host. Empty: the host's per-GPU share."
MEMORY_HELP = "Per host, e.g. 64G. Empty: the host's per-GPU share."
SHARED_MEMORY_HELP = "Size of /dev/shm, e.g. 8G. Empty: the runtime's default."


class OfferedChoice(forms.ChoiceField):
    """A choice field whose choices are what the page offers, not what it accepts: any value passes
    to the service, which refuses it in the words the API and the CLI print (quote46: a budget not
    offered read "Select a valid choice. nlp/olmo is not one of the available choices." on the
    page, "You are not a member of budget nlp/olmo or of a budget above it. …" elsewhere)."""

    def valid_value(self, value: Any) -> bool:
        return True


class CountField(forms.IntegerField):
    """A whole number typed as ASCII digits (a leading ``-`` left to the bounds' words), the API's
    and a YAML spec's rule (``fairway_cli.numbers.PLAIN_INT``); Django's ``int()`` also took ``٣``,
    ``１６``, ``1_6`` and ``+3`` (brk46: submitted here, refused everywhere else)."""

    def to_python(self, value: Any) -> int | None:
        if isinstance(value, str) and (text := value.strip()) and not PLAIN_INT.fullmatch(text.removeprefix("-")):
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
        return super().to_python(value)  # type: ignore[no-any-return]


class SubmitForm(forms.Form):
    """The submit page's form. ``budget`` offers only the leaf budgets the user may submit to."""

    name = forms.CharField(max_length=200, required=False, help_text="Defaults to the program's name.")
    image = forms.CharField(max_length=500, required=False, help_text="Container image, e.g. ghcr.io/lab/train:1.")
    command = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Split like a shell would: python train.py --lr '3e-4'.",
    )
    env = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False, help_text=ENV_HELP)
    secret_env = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        required=False,
        label="Secret env",
        help_text=ENV_HELP + " Stored and passed to the workload, never shown back to anyone.",
    )
    cluster = forms.ChoiceField()
    gpu_model = forms.ChoiceField(label="GPU model", required=False)
    # The bounds' messages are the service's (scheduler.services, scheduler.jobspec), so the page
    # and the API refuse a number in one wording (Django's was "Ensure this value is greater than
    # or equal to 1."); the form checks them too, to report them beside a field the API's parser refuses.
    gpu_count = CountField(label="GPUs", min_value=1, initial=1, error_messages={"min_value": GPU_COUNT_PROBLEM})
    budget = OfferedChoice(required=False)  # blank: the service's one default (or its refusal)
    # Not required here: a quote may leave it out (brk55: the browser refused "Quote first" without
    # it); the submit view requires it of a submission.
    min_runtime = forms.CharField(
        label="Minimum runtime",
        required=False,
        initial="1h",
        help_text=MIN_RUNTIME_HELP,
    )
    # Requests per host (DESIGN.md §3.3): empty is the host's per-GPU share.
    cpus = CountField(
        label="CPUs",
        min_value=1,
        max_value=MAX_CPUS,
        required=False,
        help_text=CPUS_HELP,
        error_messages={"min_value": CPUS_PROBLEM, "max_value": CPUS_PROBLEM},
    )
    memory = forms.CharField(max_length=32, required=False, help_text=MEMORY_HELP)
    shared_memory = forms.CharField(label="Shared memory", max_length=32, required=False, help_text=SHARED_MEMORY_HELP)

    # Job options (docs/jobs.md)
    mounts = forms.CharField(
        required=False, help_text="Mount names of the cluster's catalog, comma-separated (e.g. datasets, home)."
    )
    max_runtime = forms.CharField(
        label="Wall-time limit",
        required=False,
        help_text=MAX_RUNTIME_HELP,
    )
    retries = CountField(
        min_value=0, required=False, initial=0, help_text=RETRIES_WORDS[0].upper() + RETRIES_WORDS[1:] + "."
    )
    after = forms.CharField(
        required=False, help_text="Wait for workloads: 12, 13:any (ok = only if they succeed, the default)."
    )
    array = forms.CharField(
        required=False, help_text="One workload per index, e.g. 0-99%10 (at most 10 at once); FAIRWAY_ARRAY_INDEX."
    )
    hold = forms.BooleanField(
        required=False,
        label="Submit held",
        help_text="It waits (reason: held by its owner) until you release it from its page; it keeps its place.",
    )

    def __init__(
        self,
        *args: Any,
        budgets: list[str],
        clusters: list[str],
        models: list[str],
        quote: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.quote = quote
        if quote:  # "Quote first" runs nothing: no command needed, as the API's quote (try55)
            self.fields["command"].required = False
        # Several: a blank first choice the service refuses listing them (num42); one: that one.
        blank = [("", "choose one")] if len(budgets) > 1 else []
        self.fields["budget"].choices = blank + [(b, b) for b in budgets]
        self.fields["cluster"].choices = [(c, c) for c in clusters]
        # Blank is the cluster's one model; where it has several, the service asks for one (try42's
        # words): "any" read as any model on a cluster of several (num42).
        self.fields["gpu_model"].choices = [("", GPU_MODEL_DEFAULT)] + [(m, m) for m in models]
        most = int(settings.FAIRWAY["MAX_RETRIES"])
        retries = self.fields["retries"]
        assert isinstance(retries, forms.IntegerField)  # noqa: S101 -- narrows the type for mypy
        retries.max_value = most
        retries.validators.append(MaxValueValidator(most))
        retries.error_messages.update(min_value=retries_problem(most), max_value=retries_problem(most))
        retries.widget.attrs["max"] = most
        # the refusal's words (services: "at most 1d"); whole hours floored 5400 s to "1 h" (try42)
        max_m = int(settings.FAIRWAY["MAX_MINIMUM_RUNTIME_S"])
        from scheduler.estimates import quote_runtimes

        ladder = ", ".join(duration_text(m) if m else "0" for m in quote_runtimes(None))
        self.fields["min_runtime"].help_text += f" Empty, Quote first prices {ladder}."
        self.fields["min_runtime"].help_text += f" At most {duration_text(max_m)}."
        # "Quote first" without one prices the API's ladder (scheduler.estimates.quote_runtimes)
        self.fields["min_runtime"].required = not quote

    def submission(self) -> dict[str, Any]:
        """The API-shaped submission (after ``is_valid()``); env lines that do not parse are field errors.

        Fields the form refused are passed as typed, so that the API's parser and the service
        report every other problem in the same answer (not one at a time)."""
        data = {k: self.data.get(k) for k in self.fields if k not in ("env", "secret_env")}
        data.update(getattr(self, "cleaned_data", {}))
        env, problems = _env_lines(data.get("env") or "", "env", secret=False)
        secret, secret_problems = _env_lines(data.get("secret_env") or "", "secret_env", secret=True)
        for problem in problems:
            self.add_error("env", problem)
        for problem in secret_problems:
            self.add_error("secret_env", problem)
        for name in sorted(env.keys() & secret.keys()):  # one of the two values would be dropped
            self.add_error("secret_env", f"{name} is also set in env: give it once.")
        submission = {
            "name": data.get("name") or None,
            "image": data.get("image") or "",
            "command": data.get("command") or "",
            "env": {**env, **secret},
            "cluster": data.get("cluster"),
            "gpu_model": data.get("gpu_model") or None,
            "gpu_count": data.get("gpu_count"),
            "budget": data.get("budget"),
            "min_runtime": data.get("min_runtime"),
            "cpus": data.get("cpus"),
            "memory": data.get("memory") or None,
            "shared_memory": data.get("shared_memory") or None,
            "mounts": [m.strip() for m in (data.get("mounts") or "").split(",") if m.strip()],
            "max_runtime": data.get("max_runtime") or None,
            "retries": data.get("retries") or 0,
            "after": data.get("after") or None,
            "array": data.get("array") or None,
            "hold": data.get("hold") in (True, "on", "true", "1"),
        }
        if self.quote and not (data.get("min_runtime") or "").strip():
            del submission["min_runtime"]  # not given: the quote's ladder, as the API's
        return submission


class NotificationForm(forms.Form):
    """Per event kind, email and/or a Slack-compatible webhook (docs/jobs.md "Notifications")."""

    email_kinds = forms.MultipleChoiceField(
        choices=list(KIND_LABELS.items()), required=False, widget=forms.CheckboxSelectMultiple, label="Email me when"
    )
    webhook_kinds = forms.MultipleChoiceField(
        choices=list(KIND_LABELS.items()),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Post to the webhook when",
    )
    webhook_url = forms.CharField(
        max_length=500, required=False, label="Webhook URL", help_text='Slack-compatible: receives {"text": ...}.'
    )

    def clean_webhook_url(self) -> str:
        url = (self.cleaned_data.get("webhook_url") or "").strip()
        if url:
            problem = webhook_problem(url)
            if problem:
                raise forms.ValidationError(f"Webhook refused: {problem}.")
        return url

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        problem = webhook_without_url(
            cleaned.get("webhook_kinds") or [],
            cleaned.get("webhook_url") or "",
            field=str(self.fields["webhook_url"].label),
        )
        if problem and "webhook_url" not in self.errors:
            self.add_error("webhook_url", problem[0].upper() + problem[1:] + ".")
        return cleaned


MAX_SPEC_CHARS = MAX_MESSAGE_BYTES
"""A spec's text: what can travel to an agent in one start message, and no more."""
MAX_SPEC_INT = 2**63 - 1
"""The largest integer a spec may hold (a database's bigint): larger ones are refused, not parsed."""


_REFUSED = {
    "alias": "Aliases (*name) are not allowed in a spec.",
    "merge": "A merge key (<<) is not allowed in a spec (line {line}): write the fields out.",
    "number": f"A number is larger than {MAX_SPEC_INT}.",
    "key_twice": "A field is given twice (line {line}): give it once.",
    "number_form": (
        "A number on line {line} is octal, hex, binary or base 60 in YAML (010 is 8): write it in decimal or quote it."
    ),
}
"""The form's words for what ``strict_yaml`` refuses: they name the line, never quote the input."""


class SpecForm(forms.Form):
    """A YAML spec with the API's fields (name, budget, cluster, gpu_model, gpu_count, image,
    command, env, min_runtime, cpus, memory, shared_memory)."""

    spec = forms.CharField(widget=forms.Textarea(attrs={"rows": 14}), label="YAML spec", max_length=MAX_SPEC_CHARS)

    def submission(self) -> dict[str, Any]:
        """The parsed spec; ServiceError ``invalid_spec`` (field ``spec``) when it cannot be one.

        Error messages never quote the input: they name the line and the problem only.
        """
        try:
            data = strict_yaml.load(self.cleaned_data["spec"], max_int=MAX_SPEC_INT)
        except strict_yaml.Refused as exc:
            raise ServiceError("invalid_spec", "spec", _REFUSED[exc.kind].format(line=exc.line)) from None
        except (yaml.YAMLError, ValueError, RecursionError) as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            raise ServiceError("invalid_spec", "spec", f"This is not valid YAML{where}.") from None
        if isinstance(data, dict) and (line := strict_yaml.env_number_line(self.cleaned_data["spec"])) is not None:
            raise ServiceError("invalid_env", "spec", strict_yaml.ENV_NUMBER_TEXT.format(line=line) + ".")
        if find_unencodable(data):
            raise ServiceError("invalid_spec", "spec", "A string holds an unpaired surrogate (\\ud800-\\udfff).")
        if not isinstance(data, dict):
            raise ServiceError("invalid_spec", "spec", "The spec is a mapping of fields, e.g. command: [...].")
        fields = WorkloadSubmitSerializer()
        unknown = fields.unknown_fields(data)
        if unknown:
            names = ", ".join(name[:40] for name in unknown[:10]) + (", ..." if len(unknown) > 10 else "")
            # as the API's refusal, with the fields (a spec copied from a workload's API answer
            # named min_runtime_s, and the page did not say what it takes instead: try40)
            raise ServiceError(
                "invalid_spec", "spec", f"Unknown fields: {names} (the fields are: {fields.known_fields_text()})."
            )
        return data


def parse_submission(
    data: dict[str, Any], *, quote: bool = False
) -> tuple[dict[str, Any] | None, dict[str, list[str]]]:
    """Run the API's submission parser: service keyword arguments, or errors by field. ``quote``:
    the quote's (``WorkloadQuoteSerializer``), where a blank command or minimum runtime is not given."""
    if quote:
        data = {k: v for k, v in data.items() if not (k in ("command", "min_runtime") and v in ("", None))}
        serializer: WorkloadSubmitSerializer = WorkloadQuoteSerializer(data=data)
    else:
        serializer = WorkloadSubmitSerializer(data=data)
    if not serializer.is_valid():
        return None, {field: [str(m) for m in messages] for field, messages in serializer.errors.items()}
    return serializer.to_service_kwargs(), {}


SPEC_EXAMPLE = """\
name: pretrain-7b
budget: nlp/olmo
cluster: default
gpu_model: A100
gpu_count: 8
image: ghcr.io/lab/train:1
command: ["python", "train.py", "--steps", "1000"]
env:
  WANDB_PROJECT: olmo
  HF_TOKEN: {value: "hf_...", secret: true}
min_runtime: 2h
cpus: 64          # per host; leave out for the per-GPU share
memory: 512G
shared_memory: 64G
"""
"""The spec's shape; :func:`spec_example` puts in this install's names."""


def _yaml_text(value: str) -> str:
    """``value`` as a YAML string: bare when YAML reads it back as that text, else quoted."""
    plain = re.fullmatch(r"[A-Za-z][A-Za-z0-9_./+-]*", value) and value.lower() not in _YAML_WORDS
    return value if plain else json.dumps(value)


_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}


def spec_example(budgets: list[str], clusters: list[str], models: list[str], *, image: bool = True) -> str:
    """The submit page's YAML example with a budget the user may submit to, a cluster and a GPU
    model of this install and 1 GPU: as it stands it could be submitted (tryout36: it named
    ``nlp/olmo``, ``default`` and 8 × A100 on every install). Per-host CPUs and memory stay as
    comments, the per-GPU share fitting any host; so does the image where no host of that cluster
    and model runs one (``image`` False: ``scheduler.services.image_problem``; tryout46)."""
    text = SPEC_EXAMPLE.replace("gpu_count: 8", "gpu_count: 1")
    for field, values in (("budget", budgets), ("cluster", clusters), ("gpu_model", models)):
        if values:
            text = re.sub(rf"(?m)^{field}: .*$", lambda _m, f=field, v=values[0]: f"{f}: {_yaml_text(v)}", text)
    for field in ("cpus", "memory", "shared_memory") if image else ("image", "cpus", "memory", "shared_memory"):
        text = re.sub(rf"(?m)^{field}: ", f"# {field}: ", text)
    return text


def form_initial(spec: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The submit form's fields holding ``spec`` (``scheduler.resubmit.workload_spec``: "Submit
    again"), and the names of its secret variables, whose values the form leaves blank (never
    shown back: the page says so, and the owner may keep them server-side). A name that was its
    command's default (``default_name``) is left blank, so that a new command names the new
    workload as a submission's, the API's and ``fairway resubmit``'s (fake46; words46:
    ``scheduler.resubmit.resubmission_data``); a name the person gave is kept."""
    given = spec.get("name", "")
    if given == default_name(spec.get("command")):
        given = ""
    env = spec.get("env") or {}
    secrets = [name for name, entry in env.items() if isinstance(entry, dict) and entry.get("secret")]
    plain = {name: entry for name, entry in env.items() if name not in secrets}
    return {
        "name": given,
        "image": spec.get("image", ""),
        "command": shlex.join(spec.get("command") or []),
        "env": "\n".join(f"{name}={value}" for name, value in plain.items()),
        "secret_env": "\n".join(f"{name}=" for name in secrets),
        "cluster": spec.get("cluster"),
        "budget": spec.get("budget"),
        "gpu_model": spec.get("gpu_model", ""),
        "gpu_count": spec.get("gpu_count"),
        "min_runtime": spec.get("min_runtime"),
        "cpus": spec.get("cpus"),
        "memory": exact_size_text(spec.get("memory")),
        "shared_memory": exact_size_text(spec.get("shared_memory")),
        "mounts": ", ".join(spec.get("mounts") or []),
        "max_runtime": spec.get("max_runtime") or "",
        "retries": spec.get("retries", 0),
        "array": spec.get("array") or "",
    }, secrets


class WorkloadEditForm(forms.Form):
    """The workload page's "Change this pending workload" (``services.do_update_workload``).
    Text fields only: the API's update serializer parses them (``WorkloadUpdateSerializer``) and the
    service checks them as a submission; this form only shows their values and errors. Empty
    wall-time limit, CPUs, memory or shared memory: none / the default again."""

    CLEARABLE = ("max_runtime", "cpus", "memory", "shared_memory")

    name = forms.CharField(required=False, max_length=200)
    budget = forms.CharField(required=False, help_text="a leaf budget the owner may submit to")
    gpu_count = forms.CharField(required=False, label="GPUs")
    gpu_model = forms.CharField(required=False, label="GPU model")
    min_runtime = forms.CharField(required=False, label="Minimum runtime", help_text=MIN_RUNTIME_HELP)
    max_runtime = forms.CharField(required=False, label="Wall-time limit", help_text=MAX_RUNTIME_HELP)
    retries = forms.CharField(required=False)
    cpus = forms.CharField(required=False, label="CPUs", help_text=CPUS_HELP)
    memory = forms.CharField(required=False, label="Memory", help_text=MEMORY_HELP)
    shared_memory = forms.CharField(required=False, label="Shared memory", help_text=SHARED_MEMORY_HELP)
    version = forms.CharField(required=False, widget=forms.HiddenInput)
    """the ``spec_version`` shown: every field is posted, changed or not (``do_update_workload``'s
    ``seen_version``: a form shown before another update is refused rather than undo it, brk46)"""

    VERSION_GARBLED = (
        "This form's version of the request is not one the page showed (edited or garbled): reload the "
        "workload's page and make the change again."
    )
    """The refusal of a ``version`` that is no whole number from 0 up (``invalid_version``): the field
    is hidden, so the page shows it as a message (left50: a bare 400)."""

    def clean_version(self) -> int | None:
        """The posted ``version`` as a number; none posted: None (no check, as the API's update)."""
        from scheduler.services import MAX_DB_INT

        text = self.cleaned_data.get("version", "")
        if not text:
            return None
        if not (text.isascii() and text.isdigit()) or int(text) > MAX_DB_INT:
            raise forms.ValidationError(self.VERSION_GARBLED, code="invalid_version")
        return int(text)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, auto_id="edit_%s", **kwargs)

    def body(self) -> dict[str, Any]:
        """The posted fields as a ``PATCH workloads/{id}/`` body (after ``is_valid()``)."""
        return {
            name: None if name in self.CLEARABLE and not value.strip() else value.strip()
            for name, value in self.cleaned_data.items()
            if name in self.data and name != "version"  # a field not posted stays as it is
        }

    def show_problems(self, errors: dict[str, list[str]]) -> list[str]:
        """Put the refusals (field → messages) beside their fields; return the others (not about
        one field: not pending, forbidden), which the page shows as messages (the form may be gone)."""
        others = []
        for field, messages in errors.items():
            for message in messages:
                if field in self.fields:
                    self.add_error(field, message)
                else:
                    others.append(message)
        return others
