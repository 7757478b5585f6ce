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
import tempfile
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


def one(resources, kind, name=""):
    """The one resource of `kind` (whose name starts with `name`: generated names end in a hash)."""
    found = [r for r in resources if r["kind"] == kind and r["metadata"]["name"].startswith(name)]
    assert len(found) == 1, f"{len(found)} {kind}s named {name}* rendered"
    return found[0]


def config_map(rendered, name="lancet-config"):
    return one(rendered, "ConfigMap", name)


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def test_every_resource_is_valid_for_kubernetes(rendered):
    kinds = sorted(r["kind"] for r in rendered)
    assert kinds == ["ConfigMap", "ConfigMap", "Deployment", "HorizontalPodAutoscaler",
                     "PodDisruptionBudget", "RayCluster", "Service", "ServiceAccount"]
    for version in VERSIONS:
        for resource in (r for r in rendered if r["kind"] != "RayCluster"):
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
    config_name = config_map(rendered)["metadata"]["name"]
    refs = [e["configMapRef"]["name"] for e in container["envFrom"] if "configMapRef" in e]
    assert refs == [config_name]
    # LANCET_CLUSTERS names the file the clusters ConfigMap is mounted as.
    clusters = config_map(rendered, "lancet-clusters")
    mounted = {v["name"]: v["configMap"]["name"] for v in pod["spec"]["volumes"] if "configMap" in v}
    mount = next(m for m in container["volumeMounts"] if mounted.get(m["name"]) == clusters["metadata"]["name"])
    path = config_map(rendered)["data"]["LANCET_CLUSTERS"]
    assert os.path.dirname(path) == mount["mountPath"] and os.path.basename(path) in clusters["data"]
    # The HPA scales on CPU utilisation, which is measured against the container's request.
    assert container["resources"]["requests"]["cpu"]
    # The pod runs as the image's own user.
    dockerfile = open(os.path.join(ROOT, "Dockerfile")).read()
    uid = re.search(r"useradd --system --uid (\d+)", dockerfile).group(1)
    assert pod["spec"]["securityContext"]["runAsUser"] == int(uid)


def test_every_setting_named_is_one_lancet_reads(rendered):
    container = one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    names = set(config_map(rendered)["data"]) | {e["name"] for e in container["env"]}
    help_text = subprocess.run([os.environ.get("LANCET_BIN", "lancet"), "serve", "--help"],
                               check=True, capture_output=True, text=True).stdout
    documented = open(os.path.join(ROOT, "docs", "configuration.md")).read() + open(
        os.path.join(ROOT, "docs", "object-stores-and-replicas.md")).read()
    for name in sorted(n for n in names if n.startswith("LANCET_")):
        assert f"env: {name}=" in help_text or f"`{name}`" in documented, name


def pod_env(rendered, pod_name, files):
    """The environment the Deployment gives a pod named `pod_name`, without its Secret; the
    clusters ConfigMap's file is written under `files` (where the pod mounts it)."""
    container = one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = dict(config_map(rendered)["data"])
    for name, text in config_map(rendered, "lancet-clusters")["data"].items():
        with open(os.path.join(files, name), "w") as f:
            f.write(text)
        env["LANCET_CLUSTERS"] = os.path.join(files, os.path.basename(env["LANCET_CLUSTERS"]))
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
    files = tempfile.mkdtemp(prefix="lancet-pod-files-")
    root = pod_env(rendered, "x", files)["LANCET_DATA"]
    bucket = re.match(r"s3://([^/]+)/", root).group(1)
    urllib.request.urlopen(urllib.request.Request(f"{s3['AWS_ENDPOINT']}/{bucket}",
                                                  method="PUT")).read()
    replicas = []
    try:
        for name in ("lancet-7d9f-a", "lancet-7d9f-b"):
            # moto's endpoint and credentials (the Secret's part) and its cache folder for
            # the pod's scratch volume; Lancet() listens on loopback, not the pod's 0.0.0.0.
            env = {**pod_env(rendered, name, files), **s3}
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
        shutil.rmtree(files, ignore_errors=True)


# The RayCluster fields these manifests use, as KubeRay's CRD (ray.io/v1) defines them; its
# pod templates are checked by Kubernetes' own schema below.
RAY_CLUSTER_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "ray.io/v1"},
        "kind": {"const": "RayCluster"},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["headGroupSpec", "workerGroupSpecs"],
            "properties": {
                "rayVersion": {"type": "string"},
                "enableInTreeAutoscaling": {"type": "boolean"},
                "headGroupSpec": {
                    "type": "object", "additionalProperties": False, "required": ["template"],
                    "properties": {
                        "rayStartParams": {"type": "object", "additionalProperties": {"type": "string"}},
                        "template": {"type": "object"},
                    },
                },
                "workerGroupSpecs": {
                    "type": "array", "minItems": 1,
                    "items": {
                        "type": "object", "additionalProperties": False,
                        "required": ["groupName", "template"],
                        "properties": {
                            "groupName": {"type": "string"},
                            "replicas": {"type": "integer", "minimum": 0},
                            "minReplicas": {"type": "integer", "minimum": 0},
                            "maxReplicas": {"type": "integer", "minimum": 0},
                            "rayStartParams": {"type": "object", "additionalProperties": {"type": "string"}},
                            "template": {"type": "object"},
                        },
                    },
                },
            },
        },
    },
}


def test_the_ray_cluster_runs_lancet_tasks(rendered):
    """The RayCluster: valid for KubeRay's fields, pod templates valid for Kubernetes, a CPU
    and a GPU worker group on the Dockerfile's `ray` image with the Lancet pods' settings,
    and clusters.toml pointing at its head."""
    import jsonschema
    import tomllib

    ray = one(rendered, "RayCluster")
    jsonschema.validate(ray, RAY_CLUSTER_SCHEMA)
    groups = {g["groupName"]: g for g in ray["spec"]["workerGroupSpecs"]}
    assert set(groups) == {"cpu", "gpu"}
    templates = [ray["spec"]["headGroupSpec"]["template"], *(g["template"] for g in groups.values())]
    for version in VERSIONS:
        for t in templates:
            kubernetes_validate.validate({"apiVersion": "v1", "kind": "PodTemplate",
                                          "metadata": {"name": "t"}, "template": t},
                                         version, strict=True)
    assert groups["gpu"]["rayStartParams"]["num-gpus"] == "1"
    gpu = groups["gpu"]["template"]["spec"]["containers"][0]
    assert gpu["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert ray["spec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    # Workers read the Lancet pods' ConfigMap (by its generated name) and Secret.
    deployment = one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    for g in groups.values():
        worker = g["template"]["spec"]["containers"][0]
        assert worker["envFrom"] == deployment["envFrom"]
        assert worker["image"].startswith("lancet-ray")
        # What bubblewrap needs (docs/deploy.md): user namespaces and a fresh /proc.
        assert worker["securityContext"]["procMount"] == "Unmasked"
        assert g["template"]["spec"]["hostUsers"] is False
    dockerfile = open(os.path.join(ROOT, "Dockerfile")).read()
    assert re.search(r"^FROM rayproject/ray:" + re.escape(ray["spec"]["rayVersion"]) + r"\S* AS ray$",
                     dockerfile, re.M)
    # Every cluster of clusters.toml is this RayCluster's head (KubeRay's <name>-head-svc).
    clusters = tomllib.loads(config_map(rendered, "lancet-clusters")["data"]["clusters.toml"])
    ports = {p["name"]: p["containerPort"]
             for p in ray["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"]}
    head = f"http://{ray['metadata']['name']}-head-svc:{ports['dashboard']}"
    assert {c["address"] for c in clusters["ray"].values()} == {head}
    assert clusters["ray"]["gpu"]["num_gpus"] == 1
