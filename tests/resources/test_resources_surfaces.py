"""CPU, memory and shared-memory requests in the web form, the workload page, the clusters page and
the CLI (``fairway submit --cpus N --memory 32G --shm 8G``, ``fairway show``, ``fairway hosts``)."""

from __future__ import annotations

import pytest
from django.test import Client

from fairway_cli.cli import EXIT_API, EXIT_OK, EXIT_USAGE
from scheduler.models import Host, Workload
from tests.cli.test_cli import cli_against
from tests.conftest import PASSWORD

G = 1 << 30


@pytest.fixture
def sized(cluster):
    Host.objects.filter(name__startswith="a100").update(cpus=64, memory_bytes=512 * G)


@pytest.fixture
def browser(researcher, sized) -> Client:
    client = Client()
    assert client.login(username="researcher", password=PASSWORD)
    return client


def _form(**overrides):
    data = {
        "command": "python train.py",
        "cluster": "default",
        "gpu_model": "A100",
        "gpu_count": "2",
        "budget": "nlp/olmo",
        "min_runtime": "1h",
    }
    data.update(overrides)
    return data


def test_the_web_form_takes_requests_and_the_pages_show_them(browser):
    response = browser.post("/submit/", _form(cpus="12", memory="96G", shared_memory="16G"))
    assert response.status_code == 302, response.content.decode()[:2000]
    w = Workload.objects.get()
    assert (w.cpus, w.memory_bytes, w.shared_memory_bytes) == (12, 96 * G, 16 * G)
    page = browser.get(response["Location"]).content.decode()
    assert "12 CPUs, 96G memory, 16G /dev/shm per host" in page  # as fairway show says it (try63)
    assert "64 CPUs · 512G" in browser.get("/clusters/").content.decode()


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"memory": "lots"}, "memory", "is not a size"),
        ({"memory": "600G"}, "memory", "more than any host of the model offers"),
        ({"cpus": "65"}, "cpus", "65 CPUs per host is more than"),
        ({"memory": "8G", "shared_memory": "9G"}, "shared_memory", "at most the memory request"),
        # brk46: memory left out is the per-GPU share (2 of 8 GPUs, 512G), shared memory at most it
        (
            {"shared_memory": "1P"},
            "shared_memory",
            "at most the memory request; left out, memory is the host's per-GPU share, 128G for 2 GPUs",
        ),
    ],
)
def test_the_web_form_shows_refusals_inline(browser, overrides, field, words):
    response = browser.post("/submit/", _form(**overrides))
    assert response.status_code == 400
    assert words in " ".join(response.context["form"].errors[field])
    assert not Workload.objects.exists()


@pytest.fixture
def cli(live_server, tmp_path, monkeypatch, researcher, sized):
    run = cli_against(live_server, tmp_path, monkeypatch)
    assert run("login", "-u", "researcher", "--password-stdin", stdin=PASSWORD + "\n")[0] == EXIT_OK
    return run


def test_the_cli_submits_requests_shows_them_and_lists_host_capacity(cli, capsys):
    base = ("submit", "-b", "nlp/olmo", "-c", "default", "-m", "A100", "-g", "2", "-M", "1h")
    code, _out, err = cli(*base, "--cpus", "16", "--memory", "32G", "--shm", "8G", "--", "python", "t.py")
    assert code == EXIT_OK, err
    w = Workload.objects.get()
    assert (w.cpus, w.memory_bytes, w.shared_memory_bytes) == (16, 32 * G, 8 * G)
    code, out, _ = cli("show", str(w.pk))
    assert "resources:" in out and "16 CPUs, 32G memory, 8G /dev/shm per host" in out
    code, out, _ = cli("hosts")
    header, first = out.splitlines()[:2]
    assert "CPUS" in header and "MEMORY" in header
    assert first.split()[0] == "a100-1" and "64" in first.split() and "512G" in first.split()
    # refusals: a size that is not one (from the server, naming the field), a bad CPU count (locally)
    code, _out, err = cli(*base, "--memory", "32 gigs", "--", "python")
    assert code == EXIT_API and "memory:" in err and "is not a size" in err
    code, _out, err = cli(*base, "--cpus", "0", "--", "python")
    assert code == EXIT_USAGE and "--cpus: must be at least 1" in capsys.readouterr().err  # argparse's own
    code, _out, err = cli(*base, "--shm", "1P", "--", "python")  # brk46: memory left out, the share
    assert code == EXIT_API and "shared_memory: Shared memory is part of memory: at most the memory request;" in err
    assert Workload.objects.count() == 1
