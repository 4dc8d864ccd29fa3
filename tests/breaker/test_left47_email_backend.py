"""left47: ``EMAIL_BACKEND`` was taken as given; a typo in its dotted path started the server and
failed later, at every notification's send (``ImportError`` in the notifier's log). It is refused at
settings load, naming the variable, as every other setting read from the environment is."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from tests.breaker.test_break26 import load_settings


@pytest.mark.parametrize(
    "value",
    [
        "django.core.mail.backends.smtp.EmailBackends",  # a typo of the class
        "django.core.mail.backend.smtp.EmailBackend",  # of the module
        "smtp",  # not a dotted path
        "os.path.join",  # importable, but not an email backend
    ],
)
def test_a_bad_email_backend_is_refused_at_start(monkeypatch, value):
    with pytest.raises(ImproperlyConfigured) as error:
        load_settings(monkeypatch, EMAIL_BACKEND=value)
    words = str(error.value)
    assert words.startswith(f"EMAIL_BACKEND={value!r}") and "not an email backend" in words


@pytest.mark.parametrize(
    "value",
    [
        "django.core.mail.backends.smtp.EmailBackend",
        "django.core.mail.backends.locmem.EmailBackend",
        " django.core.mail.backends.console.EmailBackend ",
    ],
)
def test_a_real_email_backend_loads(monkeypatch, value):
    assert load_settings(monkeypatch, EMAIL_BACKEND=value)["EMAIL_BACKEND"] == value.strip()


def test_the_default_is_the_console(monkeypatch):
    monkeypatch.delenv("EMAIL_BACKEND", raising=False)
    assert load_settings(monkeypatch)["EMAIL_BACKEND"] == "django.core.mail.backends.console.EmailBackend"
