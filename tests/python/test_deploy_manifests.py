"""deploy/kubernetes: rendered offline by `kubectl kustomize`, validated against Kubernetes'
own schemas (kubernetes-validate), its parts checked against each other, and the pods'
settings run: two `lancet serve` replicas on the manifest's object-store root (moto on
loopback), with the manifest's environment, answer its probes and share their tables.

No cluster runs here; what a cluster adds (scheduling, the HPA's metrics, rollouts) is
docs/deploy.md's to explain, not this test's to pretend.
"""
import os
import re
import shutil
import subprocess
import time
import urllib.request

import kubernetes_validate
import pyarrow as pa
import pytest
import yaml

from conftest import Lancet
from test_object_store import s3  # noqa: F401 (the moto fixture)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
KUSTOMIZATION = os.path.join(ROOT, "deploy", "kubernetes")
# The oldest Kubernetes still supported upstream when this was written, and the newest
# kubernetes-validate knows.
VERSIONS = ["1.33.0", "1.37.0"]


@pytest.fixture(scope="module")
def rendered():
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed to render deploy/kubernetes (kubectl kustomize)"
    out = subprocess.run([kubectl, "kustomize", KUSTOMIZATION], check=True,
                         capture_output=True, text=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def one(resources, kind):
    found = [r for r in resources if r["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind}s rendered"
    return found[0]


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def test_every_resource_is_valid_for_kubernetes(rendered):
    kinds = sorted(r["kind"] for r in rendered)
    assert kinds == ["ConfigMap", "Deployment", "HorizontalPodAutoscaler",
                     "PodDisruptionBudget", "Service", "ServiceAccount"]
    for version in VERSIONS:
        for resource in rendered:
            # Strict: a misspelt field is an error, not a field Kubernetes ignores.
            kubernetes_validate.validate(resource, version, strict=True)
    assert all(r["metadata"].get("namespace") == "lancet" for r in rendered)


def test_the_parts_point_at_each_other(rendered):
    deployment = one(rendered, "Deployment")
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert matches(deployment["spec"]["selector"]["matchLabels"], labels)
    assert matches(one(rendered, "Service")["spec"]["selector"], labels)
    assert matches(one(rendered, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"], labels)
    target = one(rendered, "HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])

    container = pod["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] in ports, probe
    service_port = one(rendered, "Service")["spec"]["ports"][0]
    assert service_port["targetPort"] in ports
    # The generated ConfigMap's name carries a hash; kustomize must have rewritten the reference.
    config_name = one(rendered, "ConfigMap")["metadata"]["name"]
    refs = [e["configMapRef"]["name"] for e in container["envFrom"] if "configMapRef" in e]
    assert refs == [config_name]
    # The HPA scales on CPU utilisation, which is measured against the container's request.
    assert container["resources"]["requests"]["cpu"]
    # The pod runs as the image's own user.
    dockerfile = open(os.path.join(ROOT, "Dockerfile")).read()
    uid = re.search(r"useradd --system --uid (\d+)", dockerfile).group(1)
    assert pod["spec"]["securityContext"]["runAsUser"] == int(uid)


def test_every_setting_named_is_one_lancet_reads(rendered):
    container = one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    names = set(one(rendered, "ConfigMap")["data"]) | {e["name"] for e in container["env"]}
    help_text = subprocess.run([os.environ.get("LANCET_BIN", "lancet"), "serve", "--help"],
                               check=True, capture_output=True, text=True).stdout
    documented = open(os.path.join(ROOT, "docs", "configuration.md")).read() + open(
        os.path.join(ROOT, "docs", "object-stores-and-replicas.md")).read()
    for name in sorted(n for n in names if n.startswith("LANCET_")):
        assert f"env: {name}=" in help_text or f"`{name}`" in documented, name


def pod_env(rendered, pod_name):
    """The environment the Deployment gives a pod named `pod_name`, without its Secret."""
    container = one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = dict(one(rendered, "ConfigMap")["data"])
    for e in container["env"]:
        if "value" in e:
            env[e["name"]] = e["value"]
        elif e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name":
            env[e["name"]] = pod_name
        else:
            raise AssertionError(f"no stand-in for {e}")
    return env


def test_two_pods_settings_serve_one_root_and_answer_the_probes(rendered, s3):  # noqa: F811
    container = one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    probes = {container[p]["httpGet"]["path"]
              for p in ("startupProbe", "readinessProbe", "livenessProbe")}
    root = pod_env(rendered, "x")["LANCET_DATA"]
    bucket = re.match(r"s3://([^/]+)/", root).group(1)
    urllib.request.urlopen(urllib.request.Request(f"{s3['AWS_ENDPOINT']}/{bucket}",
                                                  method="PUT")).read()
    replicas = []
    try:
        for name in ("lancet-7d9f-a", "lancet-7d9f-b"):
            # moto's endpoint and credentials (the Secret's part) and its cache folder for
            # the pod's scratch volume; Lancet() listens on loopback, not the pod's 0.0.0.0.
            env = {**pod_env(rendered, name), **s3}
            replicas.append(Lancet(root, env=env))
        for replica in replicas:
            for path in probes:
                with urllib.request.urlopen(replica.base + path) as r:
                    assert r.status == 200, (replica.base, path)
        a, b = (r.lancedb() for r in replicas)
        a.create_table("through_a", pa.table({"id": [1, 2, 3], "v": ["x", "y", "z"]}))
        # Another replica's write shows within the manifest's read-consistency interval.
        deadline = time.time() + 30
        while "through_a" not in b.list_tables().tables:
            assert time.time() < deadline, "replica b never saw replica a's table"
            time.sleep(0.2)
        rows = sorted(b.open_table("through_a").search().to_list(), key=lambda r: r["id"])
        assert [(r["id"], r["v"]) for r in rows] == [(1, "x"), (2, "y"), (3, "z")]
    finally:
        for replica in replicas:
            replica.stop()
