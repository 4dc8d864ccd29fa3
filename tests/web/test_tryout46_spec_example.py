"""tryout46: on a cluster whose hosts run the ``process`` runtime (docs/deploy.md §6's trial by hand,
``--runtime process``), "Submit spec" refused the submit page's own YAML example: it named
``image: ghcr.io/lab/train:1`` and the server answered "No H100 host of cluster h100 can run a
container image ... leave the image empty". The example leaves the image as a comment there, by
the rule the submission is checked with (``scheduler.services.image_problem``)."""

from __future__ import annotations

import yaml
from django.test import Client

from accounts.services import do_add_membership
from scheduler.models import Workload
from scheduler.services import do_create_cluster, do_register_host
from tests.conftest import connected, gpu_specs


def _example(org_tree, django_user_model, labels):
    cluster = do_create_cluster("h100")
    host, _token = do_register_host(cluster, "gpu1", gpu_specs("gpu1", "H100", 4), labels)
    connected(host)
    user = django_user_model.objects.create_user(username="alice", password="pw")
    do_add_membership(user, org_tree["vision/sam"])
    web = Client()
    web.force_login(user)
    return web, web.get("/submit/").context["spec_form"].initial["spec"]


def test_the_example_names_no_image_where_no_host_runs_one_and_submits_as_it_stands(org_tree, django_user_model):
    web, example = _example(org_tree, django_user_model, {"runtime": "process"})
    assert "image" not in yaml.safe_load(example)
    assert "# image: ghcr.io/lab/train:1" in example  # still shown, as the per-host requests are

    response = web.post("/submit/", {"spec": example})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Workload.objects.get().image == ""


def test_the_example_keeps_its_image_where_a_host_runs_containers(org_tree, django_user_model):
    _web, example = _example(org_tree, django_user_model, {"runtime": "docker"})
    assert yaml.safe_load(example)["image"] == "ghcr.io/lab/train:1"
