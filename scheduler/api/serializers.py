"""Serializers of the scheduler API. Fields are listed explicitly.

Submission parsing only converts convenient inputs (a command string, a duration
string, digits); every rule about what may be submitted lives in
``scheduler.services.do_submit_workload`` so that its error codes are the API's.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.fields import SkipField
from rest_framework.relations import PKOnlyObject
from rest_framework.settings import ISO_8601, api_settings

from config.serializers import FieldsOnceMixin, RefusesUnknownFieldsMixin
from fairway_cli.numbers import CLEARABLE, PLAIN_INT, means_none, parse_duration_s
from fairway_cli.words import drain_only
from scheduler import bulk
from scheduler.models import ArrayGroup, Attempt, Cluster, Workload, WorkloadEvent
from scheduler.services import GROUP_NAME_NOT_UPDATABLE, MAX_DB_INT, SECRET_MASK
from scheduler.sizes import SizeError, parse_size

_PLAIN_INT = PLAIN_INT
"""Digits accepted as a number (:data:`fairway_cli.numbers.PLAIN_INT`, the duration parser's)."""


def mount_catalog(cluster: Cluster) -> list[dict[str, Any]]:
    """The cluster's mount catalog as the API shows it (docs/jobs.md): name, container path,
    mode, who may use it (never the host path)."""
    return [
        {
            "name": m.name,
            "container_path": m.container_path,
            "read_only": m.read_only,
            "access": m.access,
            "description": m.description,
        }
        for m in cluster.mounts.all()
    ]


class PassThroughField(serializers.Field):
    """Accepts any JSON value as is; the service function validates it."""

    def to_internal_value(self, data: Any) -> Any:
        return data

    def to_representation(self, value: Any) -> Any:
        return value


_STR_OR_INT = {"oneOf": [{"type": "string"}, {"type": "integer"}]}


@extend_schema_field({**_STR_OR_INT, "nullable": True})
class _StrOrIntField(PassThroughField):
    """A name/path or an id (schema only; the service validates)."""


@extend_schema_field(_STR_OR_INT)
class _CountField(PassThroughField):
    """An integer, or its digits as a string."""


@extend_schema_field(
    {
        "oneOf": [{"type": "array", "items": {"type": "string"}, "minItems": 1}, {"type": "string"}],
        "description": "argv list, or one string split like a shell would",
    }
)
class _CommandField(PassThroughField):
    pass


@extend_schema_field(
    {
        "type": "object",
        "nullable": True,
        "additionalProperties": {
            "oneOf": [
                {"type": "string"},
                {
                    "type": "object",
                    "properties": {"value": {"type": "string"}, "secret": {"type": "boolean"}},
                    "required": ["value"],
                },
            ]
        },
        "description": '{"NAME": "value"} or {"NAME": {"value": "...", "secret": true}}',
    }
)
class _EnvField(PassThroughField):
    pass


@extend_schema_field({"type": "string", "nullable": True})
class _NullableStrField(PassThroughField):
    pass


@extend_schema_field({**_STR_OR_INT, "description": "seconds, or a duration like 2h30m; 0 = unallocated"})
class _DurationField(PassThroughField):
    pass


@extend_schema_field(
    {
        "oneOf": [{"type": "integer", "minimum": 1}, {"type": "string"}],
        "nullable": True,
        "description": "bytes, or a size like 32G, 512M (binary units); null: the host's per-GPU share",
    }
)
class _SizeField(PassThroughField):
    pass


@extend_schema_field(
    {
        "oneOf": [{"type": "integer", "minimum": 1}, {"type": "string"}],
        "nullable": True,
        "description": "size of /dev/shm: bytes, or a size like 8G (binary units), at most memory; "
        "null: the runtime's default /dev/shm",
    }
)
class _ShmField(PassThroughField):
    pass


@extend_schema_field(
    {
        "oneOf": [{"type": "integer", "minimum": 1}, {"type": "string"}],
        "nullable": True,
        "description": "CPUs per host; null: the host's per-GPU share",
    }
)
class _CpusField(PassThroughField):
    pass


def _size_or_refuse(value: Any, field: str) -> int | None:
    if value is None or value == "":
        return None
    try:
        return parse_size(value)
    except SizeError as exc:
        raise serializers.ValidationError(str(exc), code=f"invalid_{field}") from None


@extend_schema_field({"type": "array", "items": {"type": "string"}, "description": "mount names of the cluster"})
class _NamesField(PassThroughField):
    pass


@extend_schema_field(
    {
        "oneOf": [{"type": "array", "items": _STR_OR_INT}, {"type": "string"}],
        "description": "workload ids to wait for, each ID, ID:ok (default) or ID:any; a string is comma-separated",
    }
)
class _AfterField(PassThroughField):
    pass


@extend_schema_field({**_STR_OR_INT, "nullable": True, "description": "wall-time limit: seconds or 2h30m"})
class _OptionalDurationField(PassThroughField):
    pass


_DRF = 0  # the field's own get_attribute and to_representation (DRF's loop)
_ATTR = 1  # one attribute of the instance, then the field's conversion
_CHAIN = 2  # attributes of attributes (``owner.username``), then the field's conversion
_METHOD = 3  # a SerializerMethodField: the serializer's method on the instance
_DATETIME = 4  # one attribute, an ISO 8601 datetime in the current time zone
_MISSING = object()


def _identity(value: Any) -> Any:
    return value


def _conversion(field: serializers.Field) -> Any:
    """A builtin doing exactly what ``field.to_representation`` does for that exact class, or None
    (the field's own)."""
    kind = type(field)
    if kind is serializers.IntegerField:
        return int
    if kind is serializers.CharField:
        return str
    if kind is serializers.ReadOnlyField or (kind is serializers.JSONField and not field.binary):
        return _identity
    return None


def _iso_datetime(field: serializers.Field) -> bool:
    """A ``DateTimeField`` whose output is DRF's ISO 8601 in the current time zone (no own format or
    time zone): :class:`FastRepresentationMixin` writes it without the field's per-value calls."""
    fmt = getattr(field, "format", api_settings.DATETIME_FORMAT)
    return (
        type(field) is serializers.DateTimeField
        and isinstance(fmt, str)
        and fmt.lower() == ISO_8601
        and not hasattr(field, "timezone")
        and bool(settings.USE_TZ)
    )


class FastRepresentationMixin:
    """DRF's ``Serializer.to_representation`` with each field's reading planned once per serializer
    instance (a list's child serves every row with one plan), not DRF's per-field chain of calls
    per value (``get_attribute``, ``is_simple_callable``, ``to_representation``, the time zone's
    context-local read per datetime): two thirds of a 50-row list page's CPU (issue 15).

    The plan covers plain attributes (one, or a chain) converted by the field's own
    ``to_representation`` or the builtin it amounts to (``int`` for ``IntegerField``, ``str`` for
    ``CharField``), method fields, and ISO 8601 datetimes with the request's current time zone read
    once per instance answered. Anything else, and any value the plan does not expect (an error
    while reading, a callable, a mapping instance, a naive or non-``datetime`` value, an overflow),
    goes through DRF's own reading of that field, so the answer is DRF's: the oracle is
    ``rest_framework.serializers.Serializer.to_representation`` (:func:`drf_representation`),
    compared in ``tests/api/test_fast_representation.py``."""

    def _representation_plan(self) -> Any:
        """This instance's plan: per readable field (kind, the bound field, its source or bound
        method, its conversion), from its class's field shapes (:meth:`_field_shape`, kept on the
        class by name and field type: the fields a class declares never change at run time).

        Kept on the instance for a list's child, which answers every row with it; made as it is
        read for one object: kept, its entries would live until the serializer's reference cycle
        (DRF's fields point back at their serializer) is collected, and push the collector."""
        plan = self.__dict__.get("_plan")
        if plan is not None:
            return plan
        if isinstance(getattr(self, "parent", None), serializers.ListSerializer):
            plan = self.__dict__["_plan"] = list(self._plan_entries())
            return plan
        return self._plan_entries()

    def _plan_entries(self) -> Iterator[tuple[int, Any, Any, Any]]:
        cls = type(self)
        shapes: dict[str, tuple[type, int, Any, Any]] = cls.__dict__.get("_field_shapes") or {}
        if "_field_shapes" not in cls.__dict__:
            cls._field_shapes = shapes  # type: ignore[attr-defined]  # a race builds one twice: harmless
        for field in self._readable_fields:  # type: ignore[attr-defined]
            shape = shapes.get(field.field_name)
            if shape is None or shape[0] is not type(field):
                shape = shapes[field.field_name] = (type(field), *self._field_shape(field))
            _type, kind, source, convert = shape
            if kind == _METHOD:
                yield kind, field, getattr(self, source), None
            elif convert is None and kind in (_ATTR, _CHAIN):
                yield kind, field, source, field.to_representation
            else:
                yield kind, field, source, convert

    def _field_shape(self, field: serializers.Field) -> tuple[int, Any, Any]:
        """(kind, source or method name, conversion: a builtin, or None for the bound field's own)."""
        attrs = list(field.source_attrs)
        if isinstance(field, serializers.BaseSerializer):
            return _DRF, None, None
        if type(field) is serializers.SerializerMethodField and field.parent is self:
            return _METHOD, field.method_name, None
        if isinstance(field, serializers.RelatedField) or not attrs:
            return _DRF, None, None  # PKOnlyObject, source="*": DRF's reading
        if len(attrs) == 1 and _iso_datetime(field):
            return _DATETIME, attrs[0], None
        convert = _conversion(field)
        if len(attrs) == 1:
            return _ATTR, attrs[0], convert
        return _CHAIN, tuple(attrs), convert

    def to_representation(self, instance: Any) -> dict[str, Any]:
        if isinstance(instance, Mapping):
            return drf_representation(self, instance)
        ret: dict[str, Any] = {}
        zone: Any = None
        for kind, field, source, convert in self._representation_plan():
            name = field.field_name
            if kind == _METHOD:
                ret[name] = source(instance)
                continue
            value: Any = _MISSING
            if kind != _DRF:
                try:
                    if kind == _CHAIN:
                        value = instance
                        for attr in source:
                            value = getattr(value, attr)
                            if value is None or callable(value) or isinstance(value, Mapping):
                                value = _MISSING
                                break
                    else:
                        value = getattr(instance, source)
                except Exception:  # DRF's reading below decides (default, None, skip or raise)
                    value = _MISSING
                if value is not _MISSING and callable(value):
                    value = _MISSING
            if value is _MISSING:
                _drf_field(ret, field, instance)
            elif value is None:
                ret[name] = None
            elif kind == _DATETIME:
                if type(value) is not datetime or value.utcoffset() is None:
                    ret[name] = field.to_representation(value)
                    continue
                if zone is None:
                    zone = timezone.get_current_timezone()
                try:
                    text = value.astimezone(zone).isoformat()
                except OverflowError:
                    ret[name] = field.to_representation(value)  # DRF's refusal
                    continue
                ret[name] = text[:-6] + "Z" if text.endswith("+00:00") else text
            else:
                ret[name] = convert(value)
        return ret


def _drf_field(ret: dict[str, Any], field: serializers.Field, instance: Any) -> None:
    """One field as ``Serializer.to_representation``'s loop writes it."""
    try:
        attribute = field.get_attribute(instance)
    except SkipField:
        return
    check_for_none = attribute.pk if isinstance(attribute, PKOnlyObject) else attribute
    ret[field.field_name] = None if check_for_none is None else field.to_representation(attribute)


def drf_representation(serializer: Any, instance: Any) -> dict[str, Any]:
    """DRF's own representation, field by field (the oracle of :class:`FastRepresentationMixin`)."""
    return serializers.Serializer.to_representation(serializer, instance)  # type: ignore[no-any-return]


class _HoldField(serializers.BooleanField):
    """A submission's ``hold`` (schema: a boolean), passed on as given: ``do_submit_workload``
    refuses anything but ``true`` or ``false`` (``invalid_hold``), the one rule of the API, a YAML
    spec and the form alike, as the API reads its other booleans (``dry_run``, an env entry's
    ``secret``). DRF's own reading took ``"yes"``, ``"on"``, ``1`` and ``"true"`` as true (left51)."""

    def to_internal_value(self, data: Any) -> Any:
        return data


def default_name(command: Any) -> str:
    """The name of a submission that gives none: its command's program without its directory
    (``/usr/bin/python3 x.py`` → ``python3``), ``workload`` without one. The one rule of a
    submission's and a resubmission's (``scheduler.resubmit.resubmission_data``: a name that was
    its old command's default follows a new command, words46)."""
    program = command[0] if isinstance(command, list) and command and isinstance(command[0], str) else ""
    # a NUL or blanks in the program are the command's refusal, not a name the person never gave
    return program.rsplit("/", 1)[-1].replace("\x00", "").strip()[:200] or "workload"


class WorkloadSubmitSerializer(FieldsOnceMixin, RefusesUnknownFieldsMixin, serializers.Serializer):
    """Input of ``POST /api/v1/workloads/``.

    ``budget``: path (``nlp/olmo``) or id (optional when the requester may submit to one budget
    only: that one). ``cluster``: name (optional when there is one cluster). ``gpu_model``:
    optional when the cluster has one model (required where it has several). ``command``: argv list
    or a string split like a shell would. ``min_runtime``: seconds or ``"2h30m"``.
    ``env``: ``{"NAME": "value"}`` or ``{"NAME": {"value": "...", "secret": true}}``.
    ``name``: defaults to the command's program name. ``cpus``, ``memory``, ``shared_memory``:
    requests per host it runs on (DESIGN.md §3.3; sizes as bytes or ``"32G"``), optional: the
    host's per-GPU share of CPUs and memory, the runtime's ``/dev/shm``. Jobs (docs/jobs.md):
    ``mounts`` (names of the cluster's catalog), ``max_runtime`` (wall-time limit per attempt,
    >= ``min_runtime``), ``retries`` (re-runs after a non-zero exit), ``after``
    (``ID[:ok|any]``), ``array`` (``0-99%10``: one workload per index, ``FAIRWAY_ARRAY_INDEX``),
    ``hold`` (``true``: submitted on a user hold, docs/jobs.md "Hold and release").
    """

    name = _NullableStrField(required=False, allow_null=True)
    budget = _StrOrIntField(required=False, allow_null=True)
    cluster = _StrOrIntField(required=False, allow_null=True)
    gpu_model = _NullableStrField(required=False, allow_null=True)
    gpu_count = _CountField()
    image = _NullableStrField(required=False, allow_null=True)
    command = _CommandField()
    env = _EnvField(required=False, allow_null=True)
    min_runtime = _DurationField()
    cpus = _CpusField(required=False, allow_null=True)
    memory = _SizeField(required=False, allow_null=True)
    shared_memory = _ShmField(required=False, allow_null=True)
    mounts = _NamesField(required=False, allow_null=True)
    max_runtime = _OptionalDurationField(required=False, allow_null=True)
    retries = _CountField(required=False, allow_null=True)
    after = _AfterField(required=False, allow_null=True)
    array = _NullableStrField(required=False, allow_null=True)
    hold = _HoldField(
        required=False,
        default=False,
        allow_null=True,
        help_text="submit it held (``sbatch -H``): it waits until released; null: not given (not held)",
    )

    def to_internal_value(self, data: Any) -> Any:
        cleared = [f for f in CLEARABLE if isinstance(data, dict) and means_none(data.get(f))]
        if cleared:  # "none": null, the one rule of fairway_cli.numbers.means_none
            data = data.copy()  # a form's QueryDict copies as one, mutable
            for name in cleared:
                data[name] = None
        return super().to_internal_value(data)

    def validate_cpus(self, value: Any) -> Any:
        if value == "":
            return None
        if isinstance(value, str) and _PLAIN_INT.fullmatch(value.strip()):
            return int(value.strip())
        return value

    def validate_memory(self, value: Any) -> int | None:
        return _size_or_refuse(value, "memory")

    def validate_shared_memory(self, value: Any) -> int | None:
        return _size_or_refuse(value, "shared_memory")

    def validate_max_runtime(self, value: Any) -> int | None:
        if value is None or value == "":
            return None
        try:
            return parse_duration_s(value)
        except ValueError:
            raise serializers.ValidationError(
                "The wall-time limit is seconds (an integer >= 1) or a duration like 2h30m.",
                code="invalid_max_runtime",
            ) from None

    def validate_retries(self, value: Any) -> Any:
        return self.validate_gpu_count(value)

    def validate_after(self, value: Any) -> Any:
        if isinstance(value, str):
            # "12,13:any" (docs/jobs.md); "" or " , " named no workload and read as none (in49)
            return [v.strip() for v in value.split(",") if v.strip()] or [value]
        return value

    def validate_gpu_count(self, value: Any) -> Any:
        if isinstance(value, str) and _PLAIN_INT.fullmatch(value.strip()):
            return int(value.strip())
        return value

    def validate_command(self, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return shlex.split(value)
            except ValueError as exc:
                raise serializers.ValidationError(f"Cannot split the command: {exc}.", code="invalid_command") from None
        return value

    def validate_min_runtime(self, value: Any) -> int:
        try:
            return parse_duration_s(value)
        except ValueError:
            raise serializers.ValidationError(
                "The minimum runtime is seconds (an integer >= 0) or a duration like 2h30m.",
                code="invalid_min_runtime",
            ) from None

    def to_service_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``do_submit_workload`` (after ``is_valid()``)."""
        data = self.validated_data
        command = data["command"]
        name = data.get("name")
        return {
            "name": default_name(command) if name is None else name,
            "budget": data.get("budget"),
            "cluster": data.get("cluster"),
            "gpu_model": data.get("gpu_model") or "",
            "gpu_count": data["gpu_count"],
            "image": data.get("image") if data.get("image") is not None else "",
            "command": command,
            # None: no env; anything else for normalize_env ([] or "" was taken as none: brk45)
            "env": {} if data.get("env") is None else data["env"],
            "min_runtime_s": data.get("min_runtime"),  # required but of a quote (WorkloadQuoteSerializer)
            "cpus": data.get("cpus"),
            "memory_bytes": data.get("memory"),
            "shared_memory_bytes": data.get("shared_memory"),
            # absent or None: not given; any other value for check to take or refuse ({}, "", 0 and
            # false were read as none: in49); retries 0 is a real value
            "mounts": [] if data.get("mounts") is None else data["mounts"],
            "max_runtime_s": data.get("max_runtime"),
            "retries": 0 if data.get("retries") is None else data["retries"],
            "after": [] if data.get("after") is None else data["after"],
            "array": data.get("array"),
            "hold": False
            if data.get("hold") is None
            else data["hold"],  # null: not given (left50); else as given (left51)
        }


class WorkloadQuoteSerializer(WorkloadSubmitSerializer):
    """Input of ``POST /api/v1/workloads/quote/``: a submission's body, ``min_runtime`` optional
    (DESIGN.md §3.8: a quote answers for several minimum runtimes; without one, the ladder
    ``scheduler.estimates.QUOTE_RUNTIMES_S`` alone, none of its lines ``yours``), ``command``
    too: a quote runs nothing, and its start, charge and ratio do not depend on what would run
    (try55: ``fairway submit -g 2 --quote`` said "missing: the command"). A command given is
    checked as a submission's."""

    min_runtime = _DurationField(required=False)
    command = _CommandField(required=False)

    def to_service_kwargs(self) -> dict[str, Any]:
        self.validated_data.setdefault("command", list(QUOTE_COMMAND))
        return super().to_service_kwargs()


QUOTE_COMMAND = ("true",)
"""What a quote without a command is checked as (any valid command: the quote does not read it)."""


class WorkloadResubmitSerializer(WorkloadSubmitSerializer):
    """Input of ``POST /api/v1/workloads/{id}/resubmit/``: overrides of the workload's spec
    (``GET workloads/{id}/spec/``), the fields of a submission, every one optional; ``null``
    clears an optional one. ``env`` is laid over the spec's by name (``null`` drops a variable);
    a secret's value is reused only for its owner (docs/jobs.md "Submit again")."""

    gpu_count = _CountField(required=False)
    command = _CommandField(required=False)
    min_runtime = _DurationField(required=False)


UPDATE_FIELDS = {
    "name": "name",
    "budget": "budget",
    "gpu_model": "gpu_model",
    "gpu_count": "gpu_count",
    "min_runtime": "min_runtime_s",
    "max_runtime": "max_runtime_s",
    "retries": "retries",
    "cpus": "cpus",
    "memory": "memory_bytes",
    "shared_memory": "shared_memory_bytes",
}
"""The API's names of the fields an update may change → ``services.UPDATABLE_FIELDS``."""


class WorkloadUpdateSerializer(WorkloadSubmitSerializer):
    """Input of ``PATCH /api/v1/workloads/{id}/``: some of the submission's fields, in its formats
    (``min_runtime: "2h"``, ``memory: "32G"``; ``null`` for ``max_runtime`` removes the wall-time
    limit, for ``retries`` is 0, for ``cpus``, ``memory``, ``shared_memory`` asks the host's per-GPU share again). The
    image, command, env, mounts, dependencies, array and cluster cannot change (400
    ``not_updatable``: cancel and submit again; docs/jobs.md, "Changing a pending workload")."""

    name = _NullableStrField(required=False)
    budget = _StrOrIntField(required=False)
    gpu_count = _CountField(required=False)
    min_runtime = _DurationField(required=False)
    cluster = None
    image = None
    command = None
    env = None
    mounts = None
    after = None
    array = None
    hold = None

    def to_internal_value(self, data: Any) -> Any:
        fixed = sorted(set(map(str, data.keys())) & set(FIXED_FIELDS)) if hasattr(data, "keys") else []
        if fixed:
            raise serializers.ValidationError(
                {name: [f"{name} cannot be changed after submission: cancel and submit again."] for name in fixed},
                code="not_updatable",
            )
        if hasattr(data, "keys") and "hold" in data and data["hold"] is None:
            # null is "not given" (as in a submission): no hold change (left50; was not_updatable)
            data = {k: v for k, v in data.items() if k != "hold"}
        if hasattr(data, "keys") and "hold" in data:
            raise serializers.ValidationError(
                {
                    "hold": [
                        "Hold or release it with POST workloads/{id}/hold/ or release/ (fairway hold, fairway release)."
                    ]
                },
                code="not_updatable",
            )
        return super().to_internal_value(data)

    def validate_retries(self, value: Any) -> Any:
        # null is none, 0 re-runs, as in a submission and a resubmission (left53: a PATCH refused it),
        # as max_runtime's null is no limit
        return 0 if value is None else self.validate_gpu_count(value)

    def to_changes(self) -> dict[str, Any]:
        """``services.do_update_workload``'s ``changes``: the fields given, by their service names."""
        data = self.validated_data
        changes = {UPDATE_FIELDS[name]: value for name, value in data.items()}
        if "gpu_model" in changes and changes["gpu_model"] is None:
            changes["gpu_model"] = ""  # as a submission: the cluster's only model
        return changes


class GroupUpdateSerializer(WorkloadUpdateSerializer):
    """Input of ``PATCH /api/v1/groups/{id}/``: a workload's update (:class:`WorkloadUpdateSerializer`)
    but ``name``: each member keeps ``NAME[i]`` (400 ``not_updatable``, the service's refusal)."""

    name = None

    def to_internal_value(self, data: Any) -> Any:
        if hasattr(data, "keys") and "name" in data:  # before unknown_field: the service's refusal
            raise serializers.ValidationError({"name": [GROUP_NAME_NOT_UPDATABLE]}, code="not_updatable")
        return super().to_internal_value(data)


class WorkloadSpecSerializer(serializers.Serializer):
    """The answer of ``GET /api/v1/workloads/{id}/spec/`` (schema only): the keys of
    :func:`scheduler.resubmit.workload_spec`, a submission's fields; those empty are left out."""

    name = serializers.CharField()
    budget = serializers.CharField(help_text="the budget's path")
    cluster = serializers.CharField()
    gpu_model = serializers.CharField()
    gpu_count = serializers.IntegerField()
    image = serializers.CharField(required=False)
    command = serializers.ListField(child=serializers.CharField())
    env = _EnvField(required=False)
    min_runtime = _DurationField()
    cpus = serializers.IntegerField(required=False)
    memory = serializers.IntegerField(required=False, help_text="bytes")
    shared_memory = serializers.IntegerField(required=False, help_text="bytes")
    mounts = _NamesField(required=False)
    max_runtime = _OptionalDurationField(required=False)
    retries = serializers.IntegerField()
    array = serializers.CharField(required=False, help_text="an array member's index: one workload of that index")


class GroupAnswerSerializer(serializers.Serializer):
    """What every answer of a group's action holds (``group``, ``changed``) besides what was done
    and ``members`` (left50: one shape; left55: ``changed`` as a workload's update, hold and
    release answer it)."""

    group = serializers.IntegerField()
    changed = serializers.BooleanField(help_text="false when the request changed no member (nothing written)")


class GroupUpdatedSerializer(GroupAnswerSerializer):
    """The answer of ``PATCH /api/v1/groups/{id}/``."""

    updated = serializers.IntegerField(help_text="how many pending members were changed")
    members = serializers.ListField(child=serializers.IntegerField(), help_text="the ids of the members changed")


FIXED_FIELDS = ("cluster", "image", "command", "env", "mounts", "after", "array")
"""The submission's fields an update refuses (``not_updatable``)."""


class QuoteLineSerializer(serializers.Serializer):
    """One minimum runtime of a quote (DESIGN.md §3.8)."""

    min_runtime_s = serializers.IntegerField(help_text="minimum runtime quoted, seconds (0 = unallocated)")
    estimated_start = serializers.DateTimeField(
        allow_null=True, help_text="upper bound on the start; null: none within one window"
    )
    charge_gpu_hours = serializers.FloatField(help_text="GPU-hours the protected part charges the budget (gpus × M)")
    ratio_after = serializers.FloatField(help_text="the budget's ratio (U + C) / E once admitted (commitment added)")
    ratio_after_text = serializers.CharField(
        help_text="ratio_after with the fewest significant digits (at least 3) that print the quote's rows apart"
    )
    yours = serializers.BooleanField(help_text="the minimum runtime of the request")
    starts_now = serializers.BooleanField(
        help_text="the scheduler would start it at once (estimated_start is the quote's own instant)"
    )
    searched_until = serializers.DateTimeField(
        help_text="how far the forward simulation got: with no estimated start, none before this "
        "(one window ahead unless the quote's time limit ran out)"
    )
    unfunded = serializers.BooleanField(
        help_text="it starts while its budget's cap (on_cap downgrade) is reached, so it runs unfunded as "
        "unallocated work: nothing protected, charge_gpu_hours 0, ratio_after the budget's ratio now. False "
        "with no estimated start (waits_for: priced as if it started funded)"
    )
    start_text = serializers.CharField(
        help_text="its start as the submit form and fairway submit --quote print it: now, the estimated start "
        "(either with ' (unfunded)' when unfunded), or none (none: waits for #12; none: budget nlp is on hold; "
        "none before <searched_until>)"
    )


class QuoteArraySerializer(serializers.Serializer):
    members = serializers.IntegerField(help_text="workloads the array submits")
    limit = serializers.IntegerField(allow_null=True, help_text="its %N cap: at most this many running at once")
    min_runtime_s = serializers.IntegerField(help_text="the request's own minimum runtime, which the rest prices")
    first_start = serializers.DateTimeField(
        allow_null=True, help_text="estimated start of its first member (null: none within the search)"
    )
    last_start = serializers.DateTimeField(
        allow_null=True,
        help_text="estimated start of its last member (null: not every member starts within the search; with a "
        "%N cap below its size the simulation, which ends no work on its own, starts at most N)",
    )
    started = serializers.IntegerField(help_text="members the simulation starts within the search")
    started_by = serializers.DateTimeField(allow_null=True, help_text="when the last of those starts")
    starts_now = serializers.BooleanField(help_text="its first member would start at once")
    charge_gpu_hours = serializers.FloatField(
        help_text="GPU-hours the protected parts of all its members would charge: gpus × M each, 0 for a member "
        "that starts unfunded at its budget's downgrade cap (as a line's charge)"
    )
    unfunded = serializers.IntegerField(
        help_text="members the simulation starts unfunded at their budget's downgrade cap (charged nothing). "
        "Absent from servers before arrayq46"
    )
    searched_until = serializers.DateTimeField(help_text="the simulated instant the search reached")


class ExecRequestSerializer(serializers.Serializer):
    """Input of ``POST /api/v1/workloads/{id}/exec/`` (checked by ``scheduler.execs.exec_arguments``)."""

    command = serializers.ListField(child=serializers.CharField(), help_text="argv, checked as a submission's")
    timeout = serializers.IntegerField(
        required=False, min_value=1, max_value=600, help_text="seconds, default 60: then the command is killed (124)"
    )
    attempt = serializers.IntegerField(required=False, allow_null=True, help_text="its number; default the latest")
    rank = serializers.IntegerField(
        required=False, min_value=0, help_text="a gang member's node rank: the command runs on its host; default 0"
    )


class ExecResultSerializer(serializers.Serializer):
    """Output of ``POST /api/v1/workloads/{id}/exec/``: the command ran in the attempt."""

    exit_code = serializers.IntegerField(help_text="128+N: killed by signal N; 124: killed at the timeout")
    stdout = serializers.CharField(help_text="its first 1 MiB (UTF-8, bad bytes replaced)")
    stderr = serializers.CharField(help_text="its first 1 MiB (UTF-8, bad bytes replaced)")
    stdout_base64 = serializers.CharField(
        help_text="its first 1 MiB as it is, in base64 (what fairway exec writes). Absent from servers before exec47"
    )
    stderr_base64 = serializers.CharField(
        help_text="its first 1 MiB as it is, in base64 (what fairway exec writes). Absent from servers before exec47"
    )
    truncated = serializers.BooleanField(help_text="some output was left out past 1 MiB of a stream")
    timed_out = serializers.BooleanField(help_text="killed at its timeout")


class QuoteSerializer(serializers.Serializer):
    """Output of ``POST /api/v1/workloads/quote/``: nothing is written."""

    budget = serializers.CharField()
    cluster = serializers.CharField()
    gpu_model = serializers.CharField()
    gpu_count = serializers.IntegerField()
    quotes = QuoteLineSerializer(many=True)
    waits_for = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="its after dependencies not ended yet: then no line has a start (it waits for them)",
    )
    array = QuoteArraySerializer(
        allow_null=True,
        help_text="an array submission: the lines price one member as if submitted alone; this, the whole array "
        "at the request's own minimum runtime",
    )
    notes = serializers.ListField(
        child=serializers.CharField(), help_text="what the lines assume, in the sentences the form and the CLI print"
    )


class _ScopedMixin:
    """Helpers reading the request scope that ``FairwayViewSet`` puts in the context."""

    context: dict[str, Any]

    def budget_path(self, budget_id: int) -> str:
        paths = self.context.get("budget_paths") or {}
        return paths.get(budget_id, str(budget_id))

    def may_see_private(self, workload: Workload) -> bool:
        """Env values are shown only to the workload's owner, members of its budget or above, and
        staff (``scheduler.services.may_read_private``)."""
        from scheduler.services import may_read_private

        request = self.context.get("request")
        user = getattr(request, "user", None)
        if user is None:
            return False
        return may_read_private(user, workload, self.context.get("accessible_budget_ids") or set())


class HistoryRowSerializer(serializers.Serializer):
    workload = serializers.IntegerField()
    name = serializers.CharField()
    owner = serializers.CharField()
    budget = serializers.CharField()
    cluster = serializers.CharField()
    attempt = serializers.IntegerField(help_text="the attempt's number within the workload")
    host = serializers.CharField(help_text="first (rank 0) host")
    hosts = serializers.ListField(
        child=serializers.CharField(), help_text="every host it held GPUs on, rank 0 first (a gang's parts)"
    )
    gpus = serializers.IntegerField()
    gpu_model = serializers.CharField()
    allocated = serializers.BooleanField(help_text="funded by the budget (charged)")
    submitted_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField()
    elapsed_s = serializers.IntegerField()
    end_reason = serializers.CharField()
    exit_code = serializers.IntegerField(allow_null=True)
    charged_gpu_hours = serializers.FloatField()
    charged_gpu_seconds = serializers.IntegerField(
        required=False,
        help_text="the attempt's charge in whole GPU-seconds, the figure every surface writes. Absent from "
        "servers before same47",
    )
    utilization = serializers.FloatField(
        allow_null=True,
        help_text="mean GPU utilization 0..1 over the time held (its ``efficiency.utilization``); null: not measured",
    )
    utilization_why = serializers.CharField(
        allow_null=True, required=False, help_text="why utilization is null (its ``efficiency.utilization_why``)"
    )


class HistorySerializer(serializers.Serializer):
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    count = serializers.IntegerField(help_text="attempts that ended in the range (results may be fewer: limit)")
    results = HistoryRowSerializer(many=True)


class AccountingSerializer(serializers.Serializer):
    started_at = serializers.DateTimeField(
        allow_null=True,
        help_text="agent-confirmed start of its current run (of its last once it ended: a requeued one's latest, "
        "as squeue and sacct); null while pending or starting",
    )
    wait_s = serializers.IntegerField(
        help_text="time in the queue in total: submission to its end (or now) less the run of its attempts, "
        "every wait across requeues"
    )
    elapsed_s = serializers.IntegerField(
        help_text="run time of all its attempts, the open one up to now; 0 while pending (the history keeps them)"
    )
    charged_gpu_hours = serializers.FloatField(help_text="allocated GPU-hours charged to its budget")
    charged_gpu_seconds = serializers.IntegerField(
        required=False,
        help_text="the same charge in whole GPU-seconds, the figure every surface writes (``charged_gpu_hours`` is "
        "it rounded to 4 decimals). Absent from servers before same47",
    )
    requeues = serializers.IntegerField(
        help_text="times it went back to the queue: attempts ended preempted, drained, gpu_fault, lost, "
        "or failed_to_start (not the one that failed it)"
    )
    preemptions = serializers.IntegerField(help_text="of the requeues, attempts ended preempted")
    unfunded = serializers.BooleanField(
        required=False,
        help_text="its open attempt (placed or running) runs unfunded: its budget reached its cap with on_cap "
        "downgrade (DESIGN.md §3.7), so it is neither protected nor charged; the lists mark its minimum runtime "
        "'(unfunded)'. Absent from servers before words46",
    )


class LastEndSerializer(serializers.Serializer):
    reason = serializers.ChoiceField(choices=Attempt.EndReason.choices, help_text="the attempt's end reason")
    exit_code = serializers.IntegerField(allow_null=True, help_text="its container's exit code; null: none")


class IdleSerializer(serializers.Serializer):
    since = serializers.DateTimeField(help_text="every GPU of its open attempt under threshold_pct since this minute")
    seconds = serializers.IntegerField(help_text="idle this long (at least FAIRWAY_IDLE_AFTER_S)")
    gpus = serializers.IntegerField(help_text="GPUs it holds")
    gpu_hours = serializers.FloatField(help_text="GPU-hours held idle: gpus times seconds")
    threshold_pct = serializers.FloatField(help_text="FAIRWAY_IDLE_UTIL_PCT")


class EfficiencySerializer(serializers.Serializer):
    gpus = serializers.IntegerField(help_text="GPUs held (of a workload: the most of one attempt)")
    gpu_hours = serializers.FloatField(
        help_text="GPU-hours held: from placement to the end (a gang's part released earlier: to its release), or now"
    )
    utilization = serializers.FloatField(
        allow_null=True,
        help_text="mean NVML utilization 0..1 over the measured GPU-time held: each minute's busy seconds (60 s "
        "× its mean, at most the seconds held of it) over the seconds held (a minute in which another attempt "
        "held the GPU too is the GPU's, other work's too: not measured); fixed once the minute it ended in is "
        "over; null: not measured",
    )
    utilization_why = serializers.ChoiceField(
        choices=["never_started", "no_own_minute", "no_sample"],
        allow_null=True,
        help_text="why utilization is null: never_started, no attempt of it was ever started by its agent "
        "(failed_to_start: nothing of it ran); no_own_minute, another attempt held its GPUs in every minute it "
        "held them (so far), so no minute sample is its own; no_sample, none of its own minutes had a "
        "utilization reading; null: measured (or nothing held)",
    )
    not_measured = serializers.FloatField(
        allow_null=True, help_text="share 0..1 of the GPU-time held without a minute sample; null: nothing held"
    )
    idle = serializers.FloatField(
        allow_null=True,
        help_text="share 0..1 of the measured GPU-time in minutes under idle_threshold_pct; null: not measured",
    )
    idle_threshold_pct = serializers.FloatField(help_text="FAIRWAY_IDLE_UTIL_PCT")
    memory_peak_mb = serializers.IntegerField(
        allow_null=True, help_text="the most GPU memory used on one GPU in a minute (MiB); null: not measured"
    )
    memory_total_mb = serializers.IntegerField(allow_null=True, help_text="that GPU's memory (MiB)")
    running = serializers.BooleanField(help_text="an attempt still holds its GPUs: the figures so far")


IDLE = "row_idle"
"""The attribute a list page's rows carry their ``idle`` in (``scheduler.idle.idle_of_workloads``,
one query for the page); without it a running workload reads its own."""


class PendingDrainSerializer(serializers.Serializer):
    host = serializers.CharField()
    at = serializers.IntegerField(help_text="when its drain begins (epoch seconds, as pending_detail.drain.at)")


class WorkloadListSerializer(FastRepresentationMixin, FieldsOnceMixin, _ScopedMixin, serializers.ModelSerializer):
    """A queue row: what everybody may see (queue transparency)."""

    owner = serializers.CharField(source="owner.username", read_only=True)
    budget = serializers.SerializerMethodField()
    cluster = serializers.CharField(source="cluster.name", read_only=True)
    allocated = serializers.BooleanField(read_only=True)
    accounting = serializers.SerializerMethodField()
    pending_resources = serializers.SerializerMethodField(
        help_text="what the pending reason says is short besides GPUs (cpus, memory): "
        "``pending_detail.resources``; empty when GPUs alone decide"
    )
    pending_group_limit = serializers.SerializerMethodField(
        help_text="the %N of its array group when the pending reason (``dependency``) is that its group "
        "already runs N members (``pending_detail.limit``); null otherwise"
    )
    pending_drain = serializers.SerializerMethodField(
        help_text="the scheduled drain that alone keeps it out (reason reserved_for_other: "
        "``pending_detail.drain`` where ``reserved_for`` names no workload; docs/deploy.md "
        '"Scheduled drains"): the lists say "GPUs reserved for maintenance"; null otherwise'
    )
    last_end = serializers.SerializerMethodField(
        help_text="how its last attempt ended: its end reason and exit code (null when the attempt "
        "exited with none); null with no attempt or one still running (scheduler.accounting.last_end)"
    )
    idle = serializers.SerializerMethodField(
        help_text="its running attempt's GPUs all under FAIRWAY_IDLE_UTIL_PCT for FAIRWAY_IDLE_AFTER_S or "
        'longer (scheduler.idle; docs/jobs.md "Idle GPUs"); null when not idle, or not known to be'
    )

    class Meta:
        model = Workload
        fields = [
            "id",
            "name",
            "owner",
            "budget",
            "budget_id",
            "cluster",
            "gpu_model",
            "gpu_count",
            "min_runtime_s",
            "cpus",
            "memory_bytes",
            "shared_memory_bytes",
            "allocated",
            "state",
            "submitted_at",
            "seq",
            "pending_reason",
            "pending_resources",
            "pending_group_limit",
            "pending_drain",
            "hold",
            "estimated_start",
            "estimate_unfunded",
            "finished_at",
            "accounting",
            "group",
            "array_index",
            "last_end",
            "idle",
        ]
        read_only_fields = fields
        # The workload columns these fields read (the list view loads only these; ``allocated``
        # reads min_runtime_s, ``accounting`` submitted_at and finished_at besides its annotations).
        model_columns = (
            "id",
            "name",
            "owner_id",
            "budget_id",
            "cluster_id",
            "gpu_model",
            "gpu_count",
            "min_runtime_s",
            "cpus",
            "memory_bytes",
            "shared_memory_bytes",
            "state",
            "submitted_at",
            "seq",
            "pending_reason",
            "hold",
            "estimated_start",
            "estimate_unfunded",
            "finished_at",
            "group_id",
            "array_index",
        )

    def get_budget(self, obj: Workload) -> str:
        return self.budget_path(obj.budget_id)

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_pending_resources(self, obj: Workload) -> list[str]:
        """The list's words for the reason read it (``fairway_cli.words.reason_words``). From the
        list view's annotation (``ROW_JSON``: the one key, not the whole ``pending_detail``)
        where there is one."""
        if ROW_RESOURCES in obj.__dict__:
            value = obj.__dict__[ROW_RESOURCES]
        else:
            value = (obj.pending_detail or {}).get("resources")
        return [str(r) for r in value] if isinstance(value, list) else []

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_pending_group_limit(self, obj: Workload) -> int | None:
        """The list's words for an array member held by its group's ``%N`` read it. From the list
        view's annotation (``ROW_JSON``) where there is one."""
        if ROW_GROUP_LIMIT in obj.__dict__:
            value = obj.__dict__[ROW_GROUP_LIMIT]
        else:
            value = (obj.pending_detail or {}).get("limit")
        if obj.pending_reason != "dependency" or isinstance(value, bool) or not isinstance(value, int):
            return None
        return value

    @extend_schema_field(PendingDrainSerializer(allow_null=True))
    def get_pending_drain(self, obj: Workload) -> dict[str, Any] | None:
        """The list's words for work kept out by a scheduled drain alone read it
        (``fairway_cli.words.drain_only``). From the list view's annotations (``ROW_JSON``: the
        keys ``drain`` and ``reserved_for``) where there are some."""
        if ROW_DRAIN in obj.__dict__:
            detail = {"drain": obj.__dict__[ROW_DRAIN], "reserved_for": obj.__dict__.get(ROW_RESERVED_FOR)}
        else:
            detail = obj.pending_detail or {}
        drain = drain_only(obj.pending_reason, detail)
        return {"host": drain.get("host"), "at": drain.get("at")} if drain is not None else None

    @extend_schema_field(LastEndSerializer(allow_null=True))
    def get_last_end(self, obj: Workload) -> dict[str, Any] | None:
        """From the list page's one query of its attempts (``account_page``), a detail's prefetched
        attempts, else one query of its own."""
        from scheduler.accounting import END_ROW, LAST_END, last_end

        if LAST_END in obj.__dict__:
            return obj.__dict__[LAST_END]
        attempts = getattr(obj, "_prefetched_objects_cache", {}).get("attempts")
        if attempts is not None:
            return last_end([getattr(a, f) for f in END_ROW] for a in attempts)
        return last_end(Attempt.objects.filter(workload_id=obj.pk).order_by("-number")[:1].values_list(*END_ROW))

    @extend_schema_field(IdleSerializer(allow_null=True))
    def get_idle(self, obj: Workload) -> dict[str, Any] | None:
        """``scheduler.idle``'s answer for its open attempt: the list page's (:data:`IDLE`), else its own."""
        if IDLE in obj.__dict__:
            idle = obj.__dict__[IDLE]
        elif obj.state != Workload.State.RUNNING:
            return None
        else:
            from scheduler.idle import idle_attempts, idle_of_workloads

            attempts = getattr(obj, "_prefetched_objects_cache", {}).get("attempts")
            if attempts is not None:  # a detail: its open attempt known, no query for it
                open_ids = [a.pk for a in attempts if a.ended_at is None]
                idle = next(iter(idle_attempts(open_ids).values()), None) if open_ids else None
            else:
                idle = idle_of_workloads([obj.pk]).get(obj.pk)
        return idle.as_data() if idle is not None else None

    @extend_schema_field(AccountingSerializer)
    def get_accounting(self, obj: Workload) -> dict[str, Any]:
        """Like sacct: the current run's start, wait, elapsed, GPU-hours charged, requeues (scheduler.accounting)."""
        from scheduler.accounting import accounting

        if not hasattr(obj, "acct_preemptions"):
            if "attempts" in getattr(obj, "_prefetched_objects_cache", {}):  # a detail: from them, no query
                from scheduler.accounting import account_prefetched

                account_prefetched(obj)
            else:  # a single workload without its attempts: one query
                from scheduler.accounting import with_accounting

                obj = with_accounting(Workload.objects.filter(pk=obj.pk)).get()
        data = accounting(obj)
        data["started_at"] = (
            serializers.DateTimeField().to_representation(data["started_at"]) if data["started_at"] else None
        )
        return data


class WorkloadRowSerializer(WorkloadListSerializer):
    """The list's rows: :class:`WorkloadListSerializer`'s JSON, the owner's and the cluster's names
    read from the row's own columns (``owner_name``, ``cluster_name``: the list view's annotations,
    :data:`ROW_NAMES`) instead of a user and a cluster built per row (a third of the models a page
    built). The schema keeps naming :class:`WorkloadListSerializer` (the list view's
    ``get_serializer_class``); a test compares both serializers' output."""

    owner = serializers.CharField(source="owner_name", read_only=True)
    cluster = serializers.CharField(source="cluster_name", read_only=True)


ROW_NAMES = {"owner_name": "owner__username", "cluster_name": "cluster__name"}
HELD_BY_NAME = "held_by_name"
"""The detail's annotation of who held the workload (``views.detail_rows``)."""
"""The annotations :class:`WorkloadRowSerializer` reads, and the columns they come from."""

ROW_RESOURCES = "row_resources"
ROW_GROUP_LIMIT = "row_group_limit"
ROW_DRAIN = "row_drain"
ROW_RESERVED_FOR = "row_reserved_for"
ROW_JSON = {
    ROW_RESOURCES: ("pending_detail", "resources"),
    ROW_GROUP_LIMIT: ("pending_detail", "limit"),
    ROW_DRAIN: ("pending_detail", "drain"),
    ROW_RESERVED_FOR: ("pending_detail", "reserved_for"),
}
"""The annotations of one key of a JSON column the list's rows read (column, key): the list loads
no ``pending_detail``, only what ``pending_resources``, ``pending_group_limit`` and
``pending_drain`` need of it, in the page's one query."""


class SilentHostSerializer(serializers.Serializer):
    host = serializers.CharField()
    last_heartbeat = serializers.DateTimeField(allow_null=True, help_text="null: never heard from")
    lost_at = serializers.DateTimeField(
        help_text="when the attempt ends lost (charged up to the last heartbeat) unless the host returns"
    )


class DrainingHostSerializer(serializers.Serializer):
    host = serializers.CharField()
    drain_now = serializers.BooleanField(help_text="drained ignoring protection")
    stops_at = serializers.DateTimeField(
        allow_null=True,
        help_text="when the tick stops the attempt (its protection's end, or a scheduled drain's time) and requeues "
        "the workload; null: next tick",
    )
    drains_at = serializers.DateTimeField(
        allow_null=True, help_text="when a drain scheduled for later drains the host; null: it drains already"
    )


class AttemptSerializer(FastRepresentationMixin, FieldsOnceMixin, serializers.ModelSerializer):
    host = serializers.CharField(source="host.name", read_only=True, help_text="first (rank 0) host")
    hosts = serializers.ListField(
        child=serializers.CharField(),
        source="host_names",
        read_only=True,
        help_text="every host it holds GPUs on, rank 0 first (a gang's parts)",
    )
    gpus = serializers.SerializerMethodField()
    charged_gpu_seconds = serializers.SerializerMethodField(
        help_text="GPU-seconds charged: a closed attempt's charge, an open funded one's so far"
    )
    silent_hosts = serializers.SerializerMethodField()
    draining_hosts = serializers.SerializerMethodField()
    efficiency = serializers.SerializerMethodField()
    # ``""`` until the attempt is asked to stop / ends: declared, as a read-only model field loses
    # ``allow_blank`` and the schema's enum left the blank out.
    stop_reason = serializers.ChoiceField(choices=Attempt.EndReason.choices, allow_blank=True, read_only=True)
    end_reason = serializers.ChoiceField(choices=Attempt.EndReason.choices, allow_blank=True, read_only=True)

    class Meta:
        model = Attempt
        fields = [
            "id",
            "number",
            "host",
            "hosts",
            "gpus",
            "allocated",
            "unfunded",
            "placed_at",
            "started_at",
            "protected_until",
            "stop_requested_at",
            "stop_reason",
            "ended_at",
            "end_reason",
            "exit_code",
            "charged_gpu_seconds",
            "silent_hosts",
            "draining_hosts",
            "efficiency",
        ]
        read_only_fields = fields

    @extend_schema_field(EfficiencySerializer(allow_null=True))
    def get_efficiency(self, obj: Attempt) -> dict[str, Any] | None:
        """How well it used its GPUs (``scheduler.efficiency``; docs/jobs.md "Efficiency"): its
        workload's, read once for all its attempts where the workload came with it (a detail)."""
        from scheduler.efficiency import efficiency_of_attempts, workload_efficiency

        if Attempt._meta.get_field("workload").is_cached(obj):
            found = workload_efficiency(obj.workload).attempts.get(obj.pk)
        else:
            found = efficiency_of_attempts([obj.pk]).get(obj.pk)
        return found.as_data() if found is not None else None

    def get_charged_gpu_seconds(self, obj: Attempt) -> int:
        """What the workload's ``accounting`` counts for this attempt: an open funded attempt is
        charged so far (the stored value, 0 until it ends, disagreed with the workload's total)."""
        from scheduler.accounting import attempt_charged_gpu_seconds, silent_until

        links = obj.gpu_links.all()
        return attempt_charged_gpu_seconds(obj, len(links), until=silent_until(links))

    @extend_schema_field(SilentHostSerializer(many=True))
    def get_silent_hosts(self, obj: Attempt) -> list[dict[str, Any]]:
        """An open attempt's offline hosts: since when each is silent and when the attempt ends
        ``lost`` unless it returns (``scheduler.lifecycle.silent_hosts``, as the workload page
        and ``fairway show``); empty while every host is heard from, and once it ended."""
        from scheduler.lifecycle import silent_hosts

        stamp = serializers.DateTimeField().to_representation
        return [
            {
                "host": s.host,
                "last_heartbeat": s.last_heartbeat and stamp(s.last_heartbeat),
                "lost_at": stamp(s.lost_at),
            }
            for s in silent_hosts(obj)
        ]

    @extend_schema_field(DrainingHostSerializer(many=True))
    def get_draining_hosts(self, obj: Attempt) -> list[dict[str, Any]]:
        """An open attempt's draining hosts and those with a drain scheduled, before its stop is
        issued: when the tick stops it and requeues the workload (``scheduler.lifecycle.draining_hosts``,
        as the workload page and ``fairway show``); empty otherwise."""
        from scheduler.lifecycle import draining_hosts

        stamp = serializers.DateTimeField().to_representation
        return [
            {
                "host": d.host,
                "drain_now": d.drain_now,
                "drains_at": d.drains_at and stamp(d.drains_at),
                "stops_at": d.stops_at and stamp(d.stops_at),
            }
            for d in draining_hosts(obj)
        ]

    def get_gpus(self, obj: Attempt) -> list[str]:
        """``host:index`` of every GPU, in rank then host/index order."""
        return [f"{link.gpu.host.name}:{link.gpu.index}" for link in obj.ordered_gpu_links()]


EVENT_ORDER = ("id",)
"""How a workload's events are listed (the page, the API's detail, ``fairway show``): in the order
they were recorded. ``at`` stays the instant each names, and a tick stamps its events with its
start (the instant its decisions were made for), so a slow tick's "attempt 3 placed" can carry an
``at`` before "attempt 2 ended", which the agent link recorded while the tick ran and which the
tick's placement followed; ordered by ``at`` the placement was listed first. An end and the
placement it allows are both written under the workload's row lock (docs/locking.md: the exit
report and the tick lock it first), so their ids follow the order they were committed."""


class WorkloadEventSerializer(FastRepresentationMixin, FieldsOnceMixin, serializers.ModelSerializer):
    actor = serializers.CharField(
        source="actor.username", read_only=True, default=None, allow_null=True, help_text="null: no person's doing"
    )

    class Meta:
        model = WorkloadEvent
        fields = ["at", "kind", "message", "data", "actor"]
        read_only_fields = fields


class PendingSideSerializer(serializers.Serializer):
    path = serializers.CharField()
    after_this_one = serializers.BooleanField(
        required=False,
        help_text="committed and ratio count this workload's gpus × M, as rule 2 compares them (the ratio "
        "after admission, DESIGN.md §3.2): they exceed `fairway budgets`' by it",
    )
    label = serializers.CharField(
        required=False, help_text="the side as every surface names it: the path, with ', after this one' when so"
    )
    used_gpu_hours = serializers.FloatField(required=False, help_text="U: allocated GPU-hours in the window")
    committed_gpu_hours = serializers.FloatField(
        required=False, help_text="C: protection still ahead (after this one: its gpus × M included on its side)"
    )
    entitled_gpu_hours = serializers.FloatField(required=False, help_text="E: share × GPUs × window")
    ratio = serializers.FloatField(required=False, allow_null=True, help_text="(U + C) / E")
    ratio_text = serializers.CharField(required=False, help_text="the ratio with the digits that tell the two apart")
    used_text = serializers.CharField(required=False, help_text="used GPU-hours as the sentence prints them")
    committed_text = serializers.CharField(required=False, help_text="committed GPU-hours as the sentence prints them")
    entitled_text = serializers.CharField(required=False, help_text="entitled GPU-hours as the sentence prints them")


class PendingNumbersSerializer(serializers.Serializer):
    budget = PendingSideSerializer(required=False, help_text="this workload's side of the comparison")
    other_budget = PendingSideSerializer(required=False, help_text="the rival side whose work is in the way")
    commitment_gpu_hours = serializers.FloatField(required=False, help_text="this workload's gpus × M")
    first = serializers.CharField(required=False, help_text="which side goes first: budget or other_budget")
    at = serializers.DateTimeField(
        required=False, help_text="the instant of the standing the numbers come from: the last tick's, which decided"
    )


class FurtherBelowSerializer(serializers.Serializer):
    side = serializers.CharField(help_text="the forbidden work's side: the child of the common ancestor holding it")
    ratio = serializers.FloatField()
    ratio_text = serializers.CharField()
    waiting_side = serializers.CharField(help_text="the waiting workload's side, counting its commitment")
    waiting_ratio = serializers.FloatField()
    waiting_ratio_text = serializers.CharField()


class BlockingSerializer(serializers.Serializer):
    workload = serializers.IntegerField()
    name = serializers.CharField()
    budget = serializers.CharField()
    protected_until = serializers.DateTimeField(
        allow_null=True,
        help_text="its protection end (a fair_share reason's forbidden work: null, no end makes room); while "
        "starting, the earliest (now + M); null if unallocated",
    )
    starting = serializers.BooleanField(help_text="not confirmed started yet: protected until M after it starts")
    forbidden = serializers.BooleanField(
        help_text="rule 2 forbids preempting it for this workload (reason fair_share): its side is further below "
        "its share"
    )
    further_below = FurtherBelowSerializer(
        allow_null=True, help_text="for forbidden work: the two sides rule 2 compared, with their ratios"
    )
    text = serializers.CharField(help_text="why it is in the way, in words, as the page and the CLI show it")
    protection_text = serializers.CharField(help_text="the same words as text (kept for older clients)")


STOP_ENDS_AS = {
    str(Attempt.EndReason.CANCELED): Workload.State.CANCELED,
    "timeout": Workload.State.FAILED,  # the max_runtime stop (DESIGN.md §4) where the build has it
    # A gang's part exited on its own: the others are stopped; it ends as that part did (PART_EXIT_REASONS).
    str(Attempt.EndReason.SUCCEEDED): Workload.State.SUCCEEDED,
    str(Attempt.EndReason.FAILED): Workload.State.FAILED,
}
"""What a stop leads to; every other stop (preemption, drain, fault) requeues: pending (DESIGN.md §4)."""


class StopSerializer(serializers.Serializer):
    reason = serializers.CharField()
    requested_at = serializers.DateTimeField()
    attempt = serializers.IntegerField(help_text="the attempt's number within the workload")
    ends_as = serializers.CharField(help_text="the workload's state once the GPUs are released")
    charged_until_release = serializers.BooleanField()


class PendingExplanationSerializer(serializers.Serializer):
    reason = serializers.CharField(help_text="the reason code of the last tick (DESIGN.md §3.8); empty unless pending")
    sentence = serializers.CharField(help_text="the first of the sentences")
    sentences = serializers.ListField(
        child=serializers.CharField(), help_text="the decision in words; none lists the blocking work (see blocking)"
    )
    numbers = PendingNumbersSerializer()
    blocking = BlockingSerializer(many=True)


class WorkloadDetailSerializer(WorkloadListSerializer):
    """One workload with its attempts and events. ``env`` is null for people outside its budget;
    secret values are always masked. ``can_cancel`` says whether the requester may cancel it
    (and hold or release it: docs/jobs.md "Hold and release"; ``hold``, ``held_at``, ``held_by``)."""

    env = serializers.SerializerMethodField()
    held_by = serializers.SerializerMethodField(help_text="who placed its hold (null: not held, or an account gone)")
    env_visible = serializers.SerializerMethodField()
    can_cancel = serializers.SerializerMethodField()
    why_pending = serializers.SerializerMethodField()
    pending_explanation = serializers.SerializerMethodField()
    stop = serializers.SerializerMethodField()
    estimated_start_words = serializers.SerializerMethodField()
    requests_text = serializers.SerializerMethodField(
        help_text="its CPU, memory and shared-memory requests per host in words (the page, fairway show)"
    )
    attempts = AttemptSerializer(many=True, read_only=True)
    events = WorkloadEventSerializer(many=True, read_only=True)
    after = serializers.SerializerMethodField()
    mounts = serializers.SerializerMethodField()
    resubmitted_from = serializers.IntegerField(
        source="resubmitted_from_id",
        read_only=True,
        allow_null=True,
        help_text="the workload this one was submitted again from (POST workloads/{id}/resubmit/); null: none",
    )
    resubmissions = serializers.SerializerMethodField()
    efficiency = serializers.SerializerMethodField()

    @extend_schema_field(EfficiencySerializer)
    def get_efficiency(self, obj: Workload) -> dict[str, Any]:
        """How well it used the GPUs it held, all its attempts together (``scheduler.efficiency``;
        docs/jobs.md "Efficiency"); each attempt's is in its ``attempts``. One query for both."""
        from scheduler.efficiency import workload_efficiency

        return workload_efficiency(obj).total.as_data()

    @extend_schema_field(serializers.ListField(child=serializers.IntegerField()))
    def get_resubmissions(self, obj: Workload) -> list[int]:
        """The ids of the workloads submitted again from this one, in id order (``?resubmitted_from=``
        lists them): prefetched by the detail (``views.detail_prefetches``), else one query."""
        if "resubmissions" in getattr(obj, "_prefetched_objects_cache", {}):
            return [w.pk for w in obj.resubmissions.all()]
        return list(obj.resubmissions.order_by("id").values_list("id", flat=True))

    def get_after(self, obj: Workload) -> list[dict[str, Any]]:
        """``[{"workload": 12, "condition": "ok", "state": "running"}]``: what it waits for."""
        deps = obj.dependencies.all()
        if "dependencies" not in getattr(obj, "_prefetched_objects_cache", {}):  # not by views.detail_prefetches
            deps = deps.select_related("after").order_by("after_id")
        return [{"workload": d.after_id, "condition": d.condition, "state": d.after.state} for d in deps]

    def get_mounts(self, obj: Workload) -> list[dict[str, Any]]:
        """Name, container path and mode of each mount; host paths only within its budget."""
        private = self.may_see_private(obj)
        return [{k: v for k, v in m.items() if private or k != "host_path"} for m in (obj.mounts or [])]

    class Meta(WorkloadListSerializer.Meta):
        fields = [
            *WorkloadListSerializer.Meta.fields,
            "image",
            "command",
            "env",
            "env_visible",
            "pending_detail",
            "why_pending",
            "pending_explanation",
            "stop",
            "estimated_start_words",
            "requests_text",
            "start_failures",
            "duration_hint_s",
            "mounts",
            "max_runtime_s",
            "retries",
            "retries_used",
            "after",
            "resubmitted_from",
            "resubmissions",
            "efficiency",
            "held_at",
            "held_by",
            "can_cancel",
            "attempts",
            "events",
        ]
        read_only_fields = fields

    def get_why_pending(self, obj: Workload) -> list[str]:
        """The pending reason in plain sentences with its numbers, then the work in the way
        (``PendingExplanation.lines``; empty unless pending)."""
        from scheduler.reports import explain_pending

        return explain_pending(obj, tree=self.context.get("budget_tree")).lines()

    @extend_schema_field(StopSerializer(allow_null=True))
    def get_stop(self, obj: Workload) -> dict[str, Any] | None:
        """The stop issued to the open attempt, if any: its reason, when, the attempt number, and
        ``ends_as``, the state the workload reaches once the GPUs are released."""
        if obj.state in Workload.FINAL_STATES:
            return None
        attempt = next((a for a in obj.attempts.all() if a.ended_at is None and a.stop_requested_at), None)
        if attempt is None:
            return None
        ends_as = STOP_ENDS_AS.get(attempt.stop_reason, Workload.State.PENDING)
        return {
            "reason": attempt.stop_reason,
            "requested_at": serializers.DateTimeField().to_representation(attempt.stop_requested_at),
            "attempt": attempt.number,
            "ends_as": str(ends_as),
            "charged_until_release": attempt.charged_until_release,
        }

    @extend_schema_field(PendingExplanationSerializer)
    def get_pending_explanation(self, obj: Workload) -> dict[str, Any]:
        """Why pending, structured: ``reason``, ``sentence``/``sentences``, ``numbers`` (GPU-hours
        and ratios of both sides, from the last tick's standing) and ``blocking`` (the workloads in the
        way, with their protection ends)."""
        from scheduler.reports import explain_pending

        return explain_pending(obj, tree=self.context.get("budget_tree")).as_dict()

    def get_requests_text(self, obj: Workload) -> str:
        from scheduler.reports import requests_text

        return requests_text(obj)

    def get_estimated_start_words(self, obj: Workload) -> str:
        from scheduler.reports import estimate_words

        return estimate_words(obj)

    def get_env_visible(self, obj: Workload) -> bool:
        return self.may_see_private(obj)

    def get_env(self, obj: Workload) -> dict[str, dict[str, Any]] | None:
        if not self.may_see_private(obj):
            return None
        shown: dict[str, dict[str, Any]] = {}
        for name, spec in sorted((obj.env or {}).items()):
            secret = bool(spec.get("secret"))
            shown[name] = {"value": SECRET_MASK if secret else spec.get("value", ""), "secret": secret}
        return shown

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_held_by(self, obj: Workload) -> str | None:
        """The user name of who held it: the detail's annotation (``views.detail_rows``) where
        there is one, else one query."""
        if not obj.held_by_id:
            return None
        if HELD_BY_NAME in obj.__dict__:
            return obj.__dict__[HELD_BY_NAME]
        return obj.held_by.username if obj.held_by else None

    def get_can_cancel(self, obj: Workload) -> bool:
        from scheduler.services import can_cancel

        request = self.context.get("request")
        if request is None or obj.state in Workload.FINAL_STATES:
            return False
        return can_cancel(request.user, obj, self.context.get("budget_tree"), self.context.get("memberships"))


class WorkloadUpdatedSerializer(WorkloadDetailSerializer):
    """The answer of ``PATCH /api/v1/workloads/{id}/``: the workload as written, and whether the
    update changed anything (left52; schema only, the view adds ``changed`` to the detail)."""

    changed = serializers.BooleanField(
        read_only=True, help_text="false when every value given was already the workload's (nothing written)"
    )

    class Meta(WorkloadDetailSerializer.Meta):
        fields = [*WorkloadDetailSerializer.Meta.fields, "changed"]
        read_only_fields = fields


class WorkloadHeldSerializer(WorkloadUpdatedSerializer):
    """The answer of ``POST /api/v1/workloads/{id}/hold/``: the workload, and whether the hold
    changed it (left53: ``fairway hold`` of one's own hold said "held"; schema only)."""

    changed = serializers.BooleanField(
        read_only=True, help_text="false when it was already held as firmly (nothing written, no event)"
    )


class WorkloadReleasedSerializer(WorkloadUpdatedSerializer):
    """The answer of ``POST /api/v1/workloads/{id}/release/``: the workload, and ``changed`` as
    its update and hold answer it (left55; a release that changes nothing is refused,
    ``not_held``: true; schema only)."""

    changed = serializers.BooleanField(read_only=True, help_text="true: the hold was lifted")


class GroupCanceledSerializer(GroupAnswerSerializer):
    """The answer of ``POST /api/v1/groups/{id}/cancel/``: the shape of a group's hold, release
    and update (``group``, what was done, ``members``, ``changed``)."""

    canceled = serializers.IntegerField(help_text="members canceled or asked to stop by this request")
    members = serializers.ListField(child=serializers.IntegerField(), help_text="the ids of the members canceled")


class GroupHoldSerializer(GroupAnswerSerializer):
    held = serializers.IntegerField(help_text="pending members held by this request")
    members = serializers.ListField(child=serializers.IntegerField(), help_text="the ids of the members held")


class GroupReleaseSerializer(GroupAnswerSerializer):
    released = serializers.IntegerField(help_text="held pending members released by this request")
    members = serializers.ListField(child=serializers.IntegerField(), help_text="the ids of the members released")


class _StrictBooleanField(serializers.BooleanField):
    """A JSON ``true`` or ``false`` only: ``"yes"``, ``"no"``, ``0`` or ``"false"`` are refused
    (a preview asked for as ``"dry_run": "no"`` must not be read as a go-ahead, nor the reverse)."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class _BulkIdsField(serializers.ListField):
    """``ids``: counted against :func:`scheduler.bulk.bulk_max` before any item is parsed (brk55: a
    2.5 MB body of a million ids cost 1.8 s of CPU before the cap refused it). A setting, read per
    request (not DRF's ``max_length``, fixed in the class)."""

    def to_internal_value(self, data: Any) -> Any:
        most = bulk.bulk_max()
        if isinstance(data, list) and len(data) > most:
            raise serializers.ValidationError(f"Ensure this field has no more than {most} elements.", code="max_length")
        return super().to_internal_value(data)


class BulkActionSerializer(RefusesUnknownFieldsMixin, serializers.Serializer):
    """The body of ``POST workloads/bulk/``; the workloads are those the query's filters match
    (the workload list's)."""

    action = serializers.ChoiceField(choices=list(bulk.ACTIONS), help_text="what to do to each")
    dry_run = _StrictBooleanField(
        required=False, default=False, help_text="only say what would change (ids, counts, skips); nothing changes"
    )
    ids = _BulkIdsField(
        child=serializers.IntegerField(min_value=1, max_value=MAX_DB_INT),
        required=False,
        allow_empty=True,
        help_text="act only on these of the matches (the ids a dry run answered: nothing matched since is "
        "touched); at most FAIRWAY_BULK_MAX",
    )


class BulkSkipSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    code = serializers.CharField(help_text="the single-workload action's refusal, e.g. forbidden, not_pending")


class BulkOutcomeSerializer(serializers.Serializer):
    """The answer of ``POST workloads/bulk/`` (``scheduler.bulk.BulkOutcome``)."""

    action = serializers.CharField()
    dry_run = serializers.BooleanField()
    matched = serializers.IntegerField(help_text="workloads the filters match")
    changed = serializers.IntegerField(help_text="workloads changed (a dry run: that would change)")
    ids = serializers.ListField(child=serializers.IntegerField(), help_text="their ids, ascending")
    stopping = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="of a cancel's ids, those asked to stop: they end canceled once their GPUs are released",
    )
    skipped = serializers.IntegerField(help_text="matches left as they are")
    skips = BulkSkipSerializer(many=True, help_text="each one left, ascending by id, with its code")
    reasons = serializers.DictField(
        child=serializers.CharField(), help_text="each skip code's message (its messages, when its skips had several)"
    )

    @staticmethod
    def of(outcome: Any) -> dict[str, Any]:
        return {
            "action": outcome.action,
            "dry_run": outcome.dry_run,
            "matched": outcome.matched,
            "changed": len(outcome.changed),
            "ids": outcome.changed,
            "stopping": outcome.stopping,
            "skipped": len(outcome.skipped),
            "skips": [{"id": pk, "code": code} for pk, code in outcome.skipped],
            "reasons": outcome.reasons,
        }


class SubmittedArraySerializer(serializers.Serializer):
    """What an array submission created: every member, in index order."""

    group = serializers.IntegerField(help_text="the array group (``groups/{id}/``)")
    name = serializers.CharField(help_text="the name the members share (each is ``name[index]``)")
    spec = serializers.CharField(help_text="the array as submitted, e.g. 0-99%10")
    limit = serializers.IntegerField(allow_null=True, help_text="at most this many members run at once")
    count = serializers.IntegerField(help_text="how many members were submitted")
    members = serializers.ListField(child=serializers.IntegerField(), help_text="the members' ids, in index order")
    indices = serializers.ListField(child=serializers.IntegerField(), help_text="their indices, in the same order")


class WorkloadSubmittedSerializer(WorkloadDetailSerializer):
    """The answer to a submission: the workload (an array's first member) and, for an array, what
    the submission created (``array``; null otherwise). Read from the rows the service just wrote:
    no query."""

    array = serializers.SerializerMethodField()

    class Meta(WorkloadDetailSerializer.Meta):
        fields = [*WorkloadDetailSerializer.Meta.fields, "array"]
        read_only_fields = fields

    @extend_schema_field(SubmittedArraySerializer(allow_null=True))
    def get_array(self, obj: Workload) -> dict[str, Any] | None:
        group = obj.group
        if group is None:
            return None
        members = getattr(obj, "submitted_members", None) or [obj]
        return {
            "group": group.pk,
            "name": group.name,
            "spec": group.spec,
            "limit": group.limit,
            "count": len(members),
            "members": [w.pk for w in members],
            "indices": [w.array_index for w in members],
        }


class ClusterSerializer(FieldsOnceMixin, serializers.ModelSerializer):
    """A cluster with its registered (not removed) hardware, by GPU model."""

    models = serializers.SerializerMethodField()
    mounts = serializers.SerializerMethodField()

    class Meta:
        model = Cluster
        fields = ["id", "name", "description", "models", "mounts"]
        read_only_fields = fields

    def get_models(self, obj: Cluster) -> dict[str, dict[str, int]]:
        """``{"A100": {"hosts": 2, "gpus": 16, "largest_host": 8}}``."""
        out: dict[str, dict[str, int]] = {}
        for host in obj.hosts.all():
            if host.removed_at is not None:
                continue
            gpus = list(host.gpus.all())
            if not gpus:
                continue
            entry = out.setdefault(gpus[0].model, {"hosts": 0, "gpus": 0, "largest_host": 0})
            entry["hosts"] += 1
            entry["gpus"] += len(gpus)
            entry["largest_host"] = max(entry["largest_host"], len(gpus))
        return dict(sorted(out.items()))

    def get_mounts(self, obj: Cluster) -> list[dict[str, Any]]:
        return mount_catalog(obj)


class ArrayGroupSerializer(serializers.ModelSerializer):
    """An array submission: its members' states counted, and their ids."""

    owner = serializers.CharField(source="owner.username", read_only=True)
    cluster = serializers.CharField(source="cluster.name", read_only=True)
    states = serializers.SerializerMethodField()
    members = serializers.SerializerMethodField()

    class Meta:
        model = ArrayGroup
        fields = ["id", "name", "owner", "cluster", "spec", "limit", "created_at", "states", "members"]
        read_only_fields = fields

    def get_states(self, obj: Any) -> dict[str, int]:
        out: dict[str, int] = {}
        for w in obj.members.all():
            out[w.state] = out.get(w.state, 0) + 1
        return dict(sorted(out.items()))

    def get_mounts(self, obj: Cluster) -> list[dict[str, Any]]:
        return mount_catalog(obj)

    def get_members(self, obj: Any) -> list[int]:
        return sorted(w.pk for w in obj.members.all())


class NotificationSettingsSerializer(RefusesUnknownFieldsMixin, serializers.Serializer):
    """The requester's notification choices (docs/jobs.md): kinds among ``started``,
    ``succeeded``, ``failed``, ``preempted``, ``estimate_moved``, per channel."""

    email_kinds = serializers.ListField(child=serializers.CharField(), required=False)
    webhook_kinds = serializers.ListField(child=serializers.CharField(), required=False)
    webhook_url = serializers.CharField(required=False, allow_blank=True, max_length=500)

    def validate_email_kinds(self, value: Any) -> list[str]:
        return self._kinds(value)

    def validate_webhook_kinds(self, value: Any) -> list[str]:
        return self._kinds(value)

    @staticmethod
    def _kinds(value: Any) -> list[str]:
        from scheduler.notifications import clean_kinds

        try:
            return clean_kinds(value)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc), code="invalid_kind") from None

    def validate_webhook_url(self, value: str) -> str:
        from scheduler.notifications import webhook_problem

        value = value.strip()
        if value:
            problem = webhook_problem(value)
            if problem:
                raise serializers.ValidationError(f"Webhook refused: {problem}.", code="invalid_webhook")
        return value
