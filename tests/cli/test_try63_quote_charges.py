"""try63: ``fairway submit --quote`` writes its charges as ``fairway ls`` writes GPU-time charged
(``fairway_cli.numbers.gpu_time_text``): "0.50 GPU-h" for one GPU × 30 minutes read otherwise
than the "30 GPU-min" the same run is charged in ``ls`` and ``show``."""

from __future__ import annotations

from fairway_cli.cli import EXIT_OK
from tests.cli.test_cli import cli, logged_in  # noqa: F401 -- fixtures


def test_the_quotes_charges_read_as_ls_writes_them(logged_in):  # noqa: F811
    code, out, err = logged_in("submit", "--quote", "-b", "nlp/olmo", "-c", "default", "-g", "1", "-m", "A100")

    assert code == EXIT_OK, err
    body = out.splitlines()[2:7]
    assert [row.split()[0] for row in body] == ["0", "30m", "2h", "8h", "1d"]
    assert "0 GPU-h" in body[0] and "0.00" not in body[0]
    assert "30 GPU-min" in body[1] and "0.50 GPU-h" not in body[1]
    assert "2.00 GPU-h" in body[2] and "24.00 GPU-h" in body[4]
