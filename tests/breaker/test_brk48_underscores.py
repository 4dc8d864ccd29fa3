"""YAML 1.1 reads ``1_`` as 1 and ``1__0`` as 10: an underscore that separates no two digits is a
slip, not a separator, so the strict reader refuses it, naming the line (``1_000`` still reads 1000)."""

import pytest

from fairway_common import strict_yaml


@pytest.mark.parametrize("text", ["1_", "1__0", "10_", "+1_", "-2__5"])
def test_an_underscore_between_no_two_digits_is_refused(text: str) -> None:
    with pytest.raises(strict_yaml.Refused) as caught:
        strict_yaml.load(f"a: 1\nb: {text}\n")
    assert caught.value.kind == "number_form" and caught.value.line == 2
    assert "underscore" in caught.value.problem and repr(text) in caught.value.problem


@pytest.mark.parametrize(("text", "value"), [("1_000", 1000), ("-1_0", -10), ("+7", 7), ("0", 0), ("12", 12)])
def test_separators_between_digits_still_read(text: str, value: int) -> None:
    assert strict_yaml.load(f"b: {text}\n") == {"b": value}
