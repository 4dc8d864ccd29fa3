"""quote46: ``fairway submit --quote`` prints the server's words for a line's start
(``start_text``); an older server sends none, and the CLI writes the line's fields in the same
words (``fairway_cli.words.quote_start_text``, the one statement the server uses)."""

from __future__ import annotations

import re
from typing import Any

from fairway_cli.numbers import instant_text
from fairway_cli.words import quote_start_text

LINE = {"starts_now": False, "estimated_start": None, "searched_until": "2026-03-10T14:05:09Z"}


def test_a_lines_start_in_words():
    assert quote_start_text({**LINE, "starts_now": True, "estimated_start": "2026-03-03T14:05:09Z"}) == "now"
    assert quote_start_text({**LINE, "estimated_start": "2026-03-03T14:05:09Z"}) == instant_text("2026-03-03T14:05:09Z")
    assert quote_start_text(LINE, [12, 13]) == "none: waits for #12, #13"
    assert quote_start_text(LINE, (), "budget nlp is on hold") == "none: budget nlp is on hold"
    assert quote_start_text(LINE) == f"none before {instant_text(LINE['searched_until'])}"


def _answer(**line: Any) -> dict[str, Any]:
    return {
        "budget": "nlp/olmo",
        "cluster": "default",
        "gpu_model": "A100",
        "gpu_count": 1,
        "waits_for": [],
        "array": None,
        "notes": ["a note"],
        "quotes": [
            {
                **LINE,
                "min_runtime_s": 0,
                "charge_gpu_hours": 0.0,
                "ratio_after": 0.0,
                "ratio_after_text": "0",
                "yours": False,
                **line,
            }
        ],
    }


def _starts_by(monkeypatch: Any, capsys: Any, answer: dict[str, Any]) -> str:
    from fairway_cli import cli as fairway_cli

    monkeypatch.setattr(fairway_cli.Api, "call", lambda self, method, path, **kw: answer)
    monkeypatch.setenv("FAIRWAY_URL", "http://in-process")
    monkeypatch.setenv("FAIRWAY_TOKEN", "in-process")
    argv = ["submit", "--quote", "-b", "nlp/olmo", "-c", "default", "-m", "A100", "-g", "1", "-M", "0"]
    assert fairway_cli.main(argv) == 0
    return re.split(r"\s{2,}", capsys.readouterr().out.splitlines()[2])[1]


def test_the_cli_prints_the_servers_words(monkeypatch, capsys):
    said = "none: budget nlp is on hold"
    assert _starts_by(monkeypatch, capsys, _answer(start_text=said)) == said


def test_an_older_servers_line_reads_the_same(monkeypatch, capsys):
    assert _starts_by(monkeypatch, capsys, _answer()) == quote_start_text(LINE)
    answer = _answer()
    answer["waits_for"] = [12]
    assert _starts_by(monkeypatch, capsys, answer) == "none: waits for #12"
