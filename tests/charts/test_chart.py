"""charts/koordinator rendered by the real helm (built from its Go module by hack/helm.sh).

Every parameter of Koordinator's installation guide is a value; the schema refuses wrong
types and unknown keys; the CRD switches, feature gates, koord-descheduler and
koord-device-daemon (both off by default) and the shipped scheduler and descheduler
configurations render as documented; and (envtest) every rendered object passes the
apiserver's server-side dry-run.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from controlplane.descheduler.__main__ import build_parser as descheduler_parser
from controlplane.descheduler.config import parse as parse_descheduler_config
from controlplane.manager.controllers.sloconfig import parse_slo_config
from controlplane.scheduler.config import load
from koordinator.kube.client import PatchType
from koordinator.kube.discovery import Discovery
from koordinator.kube.errors import ApiError
from koordlet.__main__ import build_parser as koordlet_parser
from koordlet.devicedaemon.__main__ import build_parser as device_daemon_parser
from koordlet.devicedaemon.daemon import load_config as load_device_daemon_config
from koordlet.system.paths import HostPaths
from tests.envtest import Envtest, apply_crds

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "koordinator"

#: the parameters of Koordinator's installation guide (v1.5), each with its default
GUIDE_PARAMETERS = {
    "featureGates": "",
    "installation.namespace": "koordinator-system",
    "installation.createNamespace": True,
    "manager.log.level": "4",
    "manager.replicas": 2,
    "manager.resources.limits.cpu": "1000m",
    "manager.resources.limits.memory": "1Gi",
    "manager.resources.requests.cpu": "500m",
    "manager.resources.requests.memory": "256Mi",
    "manager.metrics.port": 8080,
    "manager.nodeAffinity": {},
    "manager.nodeSelector": {},
    "manager.tolerations": [],
    "manager.resyncPeriod": "0",
    "manager.hostNetwork": False,
    "scheduler.log.level": "4",
    "scheduler.replicas": 2,
    "scheduler.resources.limits.cpu": "1000m",
    "scheduler.resources.limits.memory": "1Gi",
    "scheduler.resources.requests.cpu": "500m",
    "scheduler.resources.requests.memory": "256Mi",
    "scheduler.port": 10251,
    "scheduler.nodeAffinity": {},
    "scheduler.nodeSelector": {},
    "scheduler.tolerations": [],
    "scheduler.hostNetwork": False,
    "koordlet.log.level": "4",
    "koordlet.resources.limits.cpu": "500m",
    "koordlet.resources.limits.memory": "256Mi",
    "koordlet.resources.requests.cpu": "0",
    "koordlet.resources.requests.memory": "0",
    "koordlet.enableServiceMonitor": False,
    "webhookConfiguration.failurePolicy.pods": "Ignore",
    "webhookConfiguration.timeoutSeconds": 30,
    "crds.managed": True,
    "imagePullSecrets": False,
}
#: the guide's parameters whose default here differs, and why
DIFFERENT_DEFAULTS = {
    "imageRepositoryHost": "ghcr.io",  # this project's image, not upstream's
    "manager.webhook.port": 9876,  # the guide's table says 9443; koord-manager serves 9876
    "manager.image.repository": "koordinator-py/koordinator",  # one image for every component
    "scheduler.image.repository": "koordinator-py/koordinator",
    "koordlet.image.repository": "koordinator-py/koordinator",
    "manager.image.tag": "",  # the chart's appVersion
    "scheduler.image.tag": "",
    "koordlet.image.tag": "",
}
CRDS = sorted(p.name.split("_", 1)[1].removesuffix(".yaml") for p in (ROOT / "crds").glob("*.yaml"))


def render(helm: Path, *sets: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    argv = [str(helm), "template", "koordinator", str(CHART), "--namespace", "koordinator-system"]
    for value in sets:
        argv += ["--set", value]
    done = subprocess.run(
        argv, capture_output=True, text=True, check=False, env={**os.environ, "HOME": "/tmp"}
    )
    if check and done.returncode != 0:
        raise AssertionError(f"helm template failed: {done.stderr}")
    return done


def objects(helm: Path, *sets: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(render(helm, *sets).stdout) if isinstance(d, dict)]


def by_kind(docs: Sequence[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def _value(values: dict[str, Any], dotted: str) -> Any:
    node: Any = values
    for part in dotted.split("."):
        node = node[part]
    return node


def test_every_guide_parameter_is_a_value_with_its_default() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for name, default in {**GUIDE_PARAMETERS, **DIFFERENT_DEFAULTS}.items():
        assert _value(values, name) == default, name
    assert sorted(values["crds"]) == sorted(["managed", *CRDS])


def test_helm_lint_passes(helm: Path) -> None:
    done = subprocess.run(
        [str(helm), "lint", str(CHART), "--strict"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "HOME": "/tmp"},
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_default_release(helm: Path) -> None:
    docs = objects(helm)
    assert sorted(by_kind(docs, "CustomResourceDefinition")) == sorted(
        yaml.safe_load(p.read_text().split("---", 1)[1])["metadata"]["name"]
        for p in (ROOT / "crds").glob("*.yaml")
    )
    assert sorted(by_kind(docs, "PriorityClass")) == ["koord-batch", "koord-free", "koord-mid", "koord-prod"]
    assert by_kind(docs, "PriorityClass")["koord-batch"]["value"] == 5000
    deployments = by_kind(docs, "Deployment")
    assert sorted(deployments) == ["koord-manager", "koord-scheduler"]
    [koordlet] = by_kind(docs, "DaemonSet").values()
    pods = {"koordlet": koordlet["spec"]["template"]["spec"]}
    pods |= {name: d["spec"]["template"]["spec"] for name, d in deployments.items()}
    for name, pod in pods.items():
        assert pod["serviceAccountName"] == name  # one ServiceAccount per component
        [container] = pod["containers"]
        assert container["image"] == "ghcr.io/koordinator-py/koordinator:1.5.0"
        assert container["command"] == [name]
    assert sorted(by_kind(docs, "ServiceAccount")) == ["koord-manager", "koord-scheduler", "koordlet"]
    assert pods["koordlet"]["hostPID"]
    assert pods["koordlet"]["hostNetwork"]
    assert pods["koordlet"]["containers"][0]["securityContext"] == {"privileged": True}
    mutating = by_kind(docs, "MutatingWebhookConfiguration")["koordinator-mutating-webhook-configuration"]
    webhooks = {w["name"]: w for w in mutating["webhooks"]}
    assert webhooks["mpod-create.koordinator.sh"]["failurePolicy"] == "Ignore"
    assert webhooks["mpod-create.koordinator.sh"]["timeoutSeconds"] == 30
    assert webhooks["mpod-create.koordinator.sh"]["clientConfig"]["service"] == {
        "name": "koordinator-webhook-service",
        "namespace": "koordinator-system",
        "path": "/mutate-pod",
        "port": 443,
    }
    validating = by_kind(docs, "ValidatingWebhookConfiguration")[
        "koordinator-validating-webhook-configuration"
    ]
    assert {w["name"] for w in validating["webhooks"]} == {
        "vpod.koordinator.sh",
        "vpodbinding.koordinator.sh",
        "vnode.koordinator.sh",
        "velasticquota.koordinator.sh",
        "vconfigmap.koordinator.sh",
    }
    [namespace] = by_kind(docs, "Namespace").values()
    # upstream's chart labels it "controle-plane", which the webhooks' selector never matches
    assert namespace["metadata"]["labels"]["control-plane"] == "koordinator"


def test_crd_switches(helm: Path) -> None:
    without = by_kind(objects(helm, "crds.noderesourcetopologies=false"), "CustomResourceDefinition")
    assert "noderesourcetopologies.topology.node.k8s.io" not in without
    assert len(without) == len(CRDS) - 1
    assert not by_kind(objects(helm, "crds.managed=false"), "CustomResourceDefinition")


def _manager_grants(docs: Sequence[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) of koord-manager's ClusterRole."""
    role = by_kind(docs, "ClusterRole")["koord-manager-role"]
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_recommendation_controller_and_its_grants_come_together(helm: Path) -> None:
    recommendation = {
        ("", "configmaps", "get"),
        ("", "configmaps", "create"),
        ("", "configmaps", "patch"),
        *(("apps", kind, "get") for kind in ("deployments", "replicasets", "statefulsets", "daemonsets")),
        ("batch", "jobs", "get"),
        ("analysis.koordinator.sh", "recommendations", "list"),
        ("analysis.koordinator.sh", "recommendations", "watch"),
        ("analysis.koordinator.sh", "recommendations/status", "patch"),
    }
    # off by default: neither the controller nor its cluster-wide ConfigMap grant
    default = objects(helm)
    assert not [a for a in container_args(default)["koord-manager"] if a.startswith("--controllers")]
    assert not _manager_grants(default) & recommendation
    enabled = objects(helm, "manager.recommendation.enabled=true")
    assert "--controllers=*,recommendation" in container_args(enabled)["koord-manager"]
    assert recommendation <= _manager_grants(enabled)
    assert _manager_grants(enabled) - recommendation == _manager_grants(default)


def test_each_component_takes_its_own_feature_gates(helm: Path) -> None:
    docs = objects(
        helm,
        "featureGates=PodMutatingWebhook=true\\,PodValidatingWebhook=false",
        "scheduler.featureGates=ElasticQuotaEnableUpdateResourceKey=true",
        "koordlet.features=BEMemoryEvict=true",
    )
    args = container_args(docs)
    assert "--feature-gates=PodMutatingWebhook=true,PodValidatingWebhook=false" in args["koord-manager"]
    assert "--feature-gates=ElasticQuotaEnableUpdateResourceKey=true" in args["koord-scheduler"]
    assert "--feature-gates=BEMemoryEvict=true" in args["koordlet"]
    defaults = container_args(objects(helm))
    assert not any(
        a.startswith("--feature-gates") for a in defaults["koord-manager"] + defaults["koord-scheduler"]
    )
    # upstream's chart switches these koordlet gates on when koordlet.features is empty
    assert (
        "--feature-gates=BECPUEvict=true,BEMemoryEvict=true,CgroupReconcile=true,Accelerators=true"
        in defaults["koordlet"]
    )


def container_args(docs: Sequence[dict[str, Any]]) -> dict[str, list[str]]:
    return {
        d["metadata"]["name"]: d["spec"]["template"]["spec"]["containers"][0]["args"]
        for d in docs
        if d["kind"] in ("Deployment", "DaemonSet")
    }


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("manager.replicas=two", "'/manager/replicas': got string, want integer"),
        ("manager.replica=2", "replica"),
        ("webhookConfiguration.failurePolicy.pods=Sometimes", "'/webhookConfiguration/failurePolicy/pods'"),
        ("featureGates=PodMutatingWebhook", "'/featureGates'"),
        ("descheduler.featureGates=MigrationController", "'/descheduler/featureGates'"),
        ("deviceDaemon.sleepInterval=15 minutes", "'/deviceDaemon/sleepInterval'"),
        ("deviceDaemon.nodeSelector.gpu=true", "'/deviceDaemon/nodeSelector/gpu'"),
    ],
)
def test_the_schema_refuses_bad_values(helm: Path, value: str, message: str) -> None:
    done = render(helm, value, check=False)
    assert done.returncode != 0
    assert "values don't meet the specifications of the schema" in done.stderr
    assert message in done.stderr


def test_the_scheduler_config_is_the_shipped_profile(helm: Path, tmp_path: Path) -> None:
    shipped = ROOT / "controlplane" / "scheduler" / "profiles" / "koord-scheduler.yaml"
    copy = CHART / "files" / "koord-scheduler.yaml"
    assert copy.read_text() == shipped.read_text(), f"copy {shipped} to {copy}"
    docs = objects(helm, "installation.namespace=koord")
    config_map = by_kind(docs, "ConfigMap")["koord-scheduler-config"]
    path = tmp_path / "config.yaml"
    path.write_text(config_map["data"]["koord-scheduler-config"])
    config = load(path)
    assert [p.scheduler_name for p in config.profiles] == ["koord-scheduler"]
    assert config.leader_election["lease_namespace"] == "koord"


DESCHEDULER_OBJECTS = {
    "ConfigMap": ["koord-descheduler-config"],
    "Deployment": ["koord-descheduler"],
    "ServiceAccount": ["koord-descheduler"],
    "ClusterRole": ["koord-descheduler-role"],
    "ClusterRoleBinding": ["koord-descheduler-rolebinding"],
    "Role": ["koord-descheduler-role"],
    "RoleBinding": ["koord-descheduler-rolebinding"],
}


def descheduler_objects(docs: Sequence[dict[str, Any]]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for doc in docs:
        if doc["metadata"]["name"].startswith("koord-descheduler"):
            found.setdefault(doc["kind"], []).append(doc["metadata"]["name"])
    return found


def test_the_descheduler_is_off_by_default(helm: Path) -> None:
    assert yaml.safe_load((CHART / "values.yaml").read_text())["descheduler"]["enabled"] is False
    assert descheduler_objects(objects(helm)) == {}


def test_the_descheduler_when_enabled(helm: Path) -> None:
    docs = objects(
        helm,
        "descheduler.enabled=true",
        "descheduler.replicas=3",
        "descheduler.log.level=5",
        "descheduler.featureGates=PodMutatingWebhook=false",
        "descheduler.nodeSelector.pool=control",
        "installation.namespace=koord",
    )
    assert descheduler_objects(docs) == DESCHEDULER_OBJECTS
    deployment = by_kind(docs, "Deployment")["koord-descheduler"]
    assert deployment["metadata"]["namespace"] == "koord"
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "koord-descheduler"
    assert pod["nodeSelector"] == {"pool": "control"}
    assert pod["hostNetwork"] is False
    [container] = pod["containers"]
    assert container["image"] == "ghcr.io/koordinator-py/koordinator:1.5.0"
    assert container["command"] == ["koord-descheduler"]
    assert container["args"] == [
        "--config=/config-dir/koord-descheduler-config",
        "--v=5",
        "--feature-gates=PodMutatingWebhook=false",
    ]
    parsed = descheduler_parser().parse_args(container["args"])  # koord-descheduler takes them
    assert parsed.config == "/config-dir/koord-descheduler-config"
    assert parsed.verbosity == 5
    assert container["ports"] == [{"name": "http-metrics", "containerPort": 10251}]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 10251, "scheme": "HTTP"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 10251, "scheme": "HTTP"}
    assert container["resources"] == {
        "limits": {"cpu": "1000m", "memory": "1Gi"},
        "requests": {"cpu": "500m", "memory": "256Mi"},
    }
    scheduler = by_kind(docs, "Deployment")["koord-scheduler"]["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"] == scheduler["securityContext"]
    assert container["volumeMounts"] == [{"name": "config", "mountPath": "/config-dir", "readOnly": True}]
    assert pod["volumes"] == [{"name": "config", "configMap": {"name": "koord-descheduler-config"}}]
    assert deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"]


def test_the_descheduler_rbac(helm: Path) -> None:
    docs = objects(helm, "descheduler.enabled=true", "installation.namespace=koord")
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in by_kind(docs, "ClusterRole")["koord-descheduler-role"]["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    read = {"get", "list", "watch"}
    every = read | {"create", "update", "patch", "delete"}
    assert granted == {
        ("", "pods"): read | {"delete", "patch"},
        ("", "pods/eviction"): {"create"},
        ("", "nodes"): read,
        ("", "events"): {"create", "patch"},
        ("slo.koordinator.sh", "nodemetrics"): read,
        ("scheduling.koordinator.sh", "podmigrationjobs"): every,
        ("scheduling.koordinator.sh", "podmigrationjobs/status"): {"get", "update", "patch"},
        ("scheduling.koordinator.sh", "reservations"): every,
        ("apps", "replicasets"): read,
        ("apps", "statefulsets"): read,
        ("batch", "jobs"): read,
        ("scheduling.k8s.io", "priorityclasses"): read,
    }
    subject = {"kind": "ServiceAccount", "name": "koord-descheduler", "namespace": "koord"}
    binding = by_kind(docs, "ClusterRoleBinding")["koord-descheduler-rolebinding"]
    assert binding["roleRef"]["name"] == "koord-descheduler-role"
    assert binding["subjects"] == [subject]
    role = by_kind(docs, "Role")["koord-descheduler-role"]
    assert role["metadata"]["namespace"] == "koord"
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]}
    ]
    role_binding = by_kind(docs, "RoleBinding")["koord-descheduler-rolebinding"]
    assert role_binding["metadata"]["namespace"] == "koord"
    assert role_binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "koord-descheduler-role",
    }
    assert role_binding["subjects"] == [subject]
    assert by_kind(docs, "ServiceAccount")["koord-descheduler"]["metadata"]["namespace"] == "koord"


def test_the_descheduler_config_is_the_shipped_profile(helm: Path) -> None:
    shipped = ROOT / "controlplane" / "descheduler" / "profiles" / "koord-descheduler.yaml"
    copy = CHART / "files" / "koord-descheduler.yaml"
    assert copy.read_bytes() == shipped.read_bytes(), f"copy {shipped} to {copy}"
    docs = objects(helm, "descheduler.enabled=true", "installation.namespace=koord")
    config_map = by_kind(docs, "ConfigMap")["koord-descheduler-config"]
    assert config_map["metadata"]["namespace"] == "koord"
    config = parse_descheduler_config(yaml.safe_load(config_map["data"]["koord-descheduler-config"]))
    assert [p.name for p in config.profiles] == ["koord-descheduler"]
    assert config.plugin_names() == {"MigrationController"}
    assert config.leader_election["lease_namespace"] == "koord"
    assert config.healthz_bind_address == config.metrics_bind_address == "0.0.0.0:10251"
    # Koordinator's own pods stay where they are: the installation namespace is excluded
    args = config.profiles[0].args
    assert args["MigrationController"].exclude_namespaces == ("kube-system", "koord")
    assert args["LowNodeLoad"].exclude_namespaces == ("kube-system", "koord")


def test_the_descheduler_port_is_the_configs(helm: Path) -> None:
    docs = objects(helm, "descheduler.enabled=true", "descheduler.port=10300")
    config_map = by_kind(docs, "ConfigMap")["koord-descheduler-config"]
    config = parse_descheduler_config(yaml.safe_load(config_map["data"]["koord-descheduler-config"]))
    assert config.healthz_bind_address == config.metrics_bind_address == "0.0.0.0:10300"
    template = by_kind(docs, "Deployment")["koord-descheduler"]["spec"]["template"]
    [container] = template["spec"]["containers"]
    assert container["ports"] == [{"name": "http-metrics", "containerPort": 10300}]
    assert container["readinessProbe"]["httpGet"]["port"] == 10300
    assert container["livenessProbe"]["httpGet"]["port"] == 10300
    default = by_kind(objects(helm, "descheduler.enabled=true"), "Deployment")["koord-descheduler"]
    # the checksum is the rendered config's: a changed one rolls the pods
    checksum = template["metadata"]["annotations"]["checksum/config"]
    assert default["spec"]["template"]["metadata"]["annotations"]["checksum/config"] != checksum


def component_objects(docs: Sequence[dict[str, Any]], prefix: str) -> dict[str, list[str]]:
    """The kinds and names of the objects named ``prefix...`` or bound to such a
    ServiceAccount."""
    found: dict[str, list[str]] = {}
    for doc in docs:
        subjects = [s.get("name", "") for s in doc.get("subjects", [])]
        if doc["metadata"]["name"].startswith(prefix) or any(n.startswith(prefix) for n in subjects):
            found.setdefault(doc["kind"], []).append(doc["metadata"]["name"])
    return found


def host_path(pod: dict[str, Any], container: dict[str, Any], path: str) -> PurePosixPath:
    """Where ``path`` of ``container`` is on the host, through its hostPath mounts."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    inside = PurePosixPath(path)
    for mount in container["volumeMounts"]:
        mount_path = PurePosixPath(mount["mountPath"])
        if inside == mount_path or mount_path in inside.parents:
            host = PurePosixPath(volumes[mount["name"]]["hostPath"]["path"])
            return host / inside.relative_to(mount_path)
    raise AssertionError(f"{path} is on no hostPath mount of {container['name']}")


def test_the_device_daemon_is_off_by_default(helm: Path) -> None:
    assert yaml.safe_load((CHART / "values.yaml").read_text())["deviceDaemon"]["enabled"] is False
    assert component_objects(objects(helm), "koord-device-daemon") == {}


def test_the_device_daemon_when_enabled(helm: Path) -> None:
    docs = objects(
        helm,
        "deviceDaemon.enabled=true",
        "deviceDaemon.log.level=5",
        "deviceDaemon.sleepInterval=10m",
        "deviceDaemon.runtimeClassName=nvidia",
        "deviceDaemon.nodeSelector.nvidia\\.com/gpu\\.product=NVIDIA-H100",
        "deviceDaemon.tolerations[0].key=nvidia.com/gpu",
        "deviceDaemon.tolerations[0].operator=Exists",
        "installation.namespace=koord",
    )
    # a DaemonSet and a ServiceAccount: no role, nothing bound to it
    assert component_objects(docs, "koord-device-daemon") == {
        "DaemonSet": ["koord-device-daemon"],
        "ServiceAccount": ["koord-device-daemon"],
    }
    account = by_kind(docs, "ServiceAccount")["koord-device-daemon"]
    assert account["metadata"]["namespace"] == "koord"
    assert account["automountServiceAccountToken"] is False
    daemon_set = by_kind(docs, "DaemonSet")["koord-device-daemon"]
    assert daemon_set["metadata"]["namespace"] == "koord"
    pod = daemon_set["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "koord-device-daemon"
    assert pod["automountServiceAccountToken"] is False
    assert not pod.get("hostNetwork")
    assert not pod.get("hostPID")
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    [container] = pod["containers"]
    assert container["image"] == "ghcr.io/koordinator-py/koordinator:1.5.0"
    assert container["command"] == ["koord-device-daemon"]
    assert container["args"] == [
        "--prints-output-file=/var/run/koordlet/xpu-device-infos/ic-device",
        "--sleep-interval=10m",
        "--v=5",
    ]
    parsed = device_daemon_parser().parse_args(container["args"])  # koord-device-daemon takes them
    assert parsed.verbosity == 5
    config = load_device_daemon_config(
        {"sleep_interval": parsed.sleep_interval, "prints_output_file": parsed.prints_output_file}, environ={}
    )
    assert config.sleep_interval_s == 600
    assert config.prints_output_file == "/var/run/koordlet/xpu-device-infos/ic-device"
    assert not config.oneshot
    # the NVIDIA container runtime gives it NVML
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility"}
    assert container["resources"] == {
        "limits": {"cpu": "200m", "memory": "256Mi"},
        "requests": {"cpu": "0", "memory": "0"},
    }
    assert container["securityContext"] == {
        "runAsUser": 0,  # the host's socket directory is root's
        "runAsNonRoot": False,
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container["volumeMounts"] == [
        {"name": "koordlet-sock", "mountPath": "/var/run/koordlet"},
        {"name": "host-sys", "mountPath": "/host-sys/", "readOnly": True},
    ]
    assert pod["volumes"] == [
        {"name": "koordlet-sock", "hostPath": {"path": "/var/run/koordlet", "type": "DirectoryOrCreate"}},
        {"name": "host-sys", "hostPath": {"path": "/sys/", "type": "Directory"}},
    ]
    # no --sys-root-dir: the daemon's default in a pod is the mounted host /sys
    assert parsed.sys_root_dir is None
    assert host_path(pod, container, str(HostPaths.from_environ({}).sys_root)) == PurePosixPath("/sys")


def test_the_device_daemon_defaults(helm: Path) -> None:
    docs = objects(helm, "deviceDaemon.enabled=true")
    pod = by_kind(docs, "DaemonSet")["koord-device-daemon"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert "--sleep-interval=900s" in container["args"]
    assert "--v=4" in container["args"]
    assert not {"runtimeClassName", "nodeSelector", "affinity", "tolerations"} & set(pod)


@pytest.mark.parametrize(
    "sock_dir", ["/var/run/koordlet", "/var/run/koordlet/", "/run/koordlet", "/data/koordlet/"]
)
def test_the_koordlet_reads_what_the_device_daemon_writes(helm: Path, sock_dir: str) -> None:
    docs = objects(helm, "deviceDaemon.enabled=true", f"koordlet.hostDirs.koordletSockDir={sock_dir}")
    daemon_sets = by_kind(docs, "DaemonSet")
    daemon_pod = daemon_sets["koord-device-daemon"]["spec"]["template"]["spec"]
    [daemon] = daemon_pod["containers"]
    output = device_daemon_parser().parse_args(daemon["args"]).prints_output_file
    written = host_path(daemon_pod, daemon, output)
    koordlet_pod = daemon_sets["koordlet"]["spec"]["template"]["spec"]
    [koordlet] = koordlet_pod["containers"]
    infos_dir = koordlet_parser().parse_args(koordlet["args"]).xpu_device_infos_dir
    assert written.parent == host_path(koordlet_pod, koordlet, infos_dir)
    assert written == PurePosixPath(sock_dir) / "xpu-device-infos" / "ic-device"
    # the flag only where the default (/var/run/koordlet/xpu-device-infos) would miss the mount
    given = [a for a in koordlet["args"] if a.startswith("--xpu-device-infos-dir")]
    assert bool(given) == (sock_dir.rstrip("/") != "/var/run/koordlet")


def test_the_koordlets_metric_blocks_go_to_an_empty_dir(helm: Path) -> None:
    [daemon_set] = by_kind(objects(helm), "DaemonSet").values()
    pod = daemon_set["spec"]["template"]["spec"]
    [koordlet] = pod["containers"]
    tsdb_path = PurePosixPath(koordlet_parser().parse_args(koordlet["args"]).tsdb_path)
    [mount] = [m for m in koordlet["volumeMounts"] if PurePosixPath(m["mountPath"]) == tsdb_path]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume == {"name": mount["name"], "emptyDir": {}}  # the node's disk, gone with the pod


@pytest.mark.envtest
@pytest.mark.parametrize(
    "sets",
    [
        (),
        ("descheduler.enabled=true",),
        ("deviceDaemon.enabled=true",),
        ("manager.recommendation.enabled=true",),
    ],
    ids=["default", "descheduler", "deviceDaemon", "recommendation"],
)
async def test_every_rendered_object_passes_server_side_dry_run(
    helm: Path, envtest: Envtest, sets: tuple[str, ...]
) -> None:
    docs = objects(helm, *sets)
    async with envtest.client() as client:
        await apply_crds(client, [d for d in docs if d["kind"] == "CustomResourceDefinition"])
        await client.ensure_namespace("koordinator-system")
        discovery = Discovery(client)
        refused = []
        for doc in docs:
            if doc["kind"] in ("CustomResourceDefinition", "Namespace"):
                continue
            resource = await discovery.for_object(doc)
            try:  # server-side apply: objects other tests made (koord-batch) exist already
                meta = doc["metadata"]
                await client.patch(
                    resource,
                    meta["name"],
                    doc,
                    meta.get("namespace"),
                    patch_type=PatchType.APPLY,
                    field_manager="chart-dry-run",
                    force=True,
                    dry_run=True,
                )
            except ApiError as exc:  # every refusal is reported at once
                refused.append(f"{doc['kind']} {doc['metadata']['name']}: {exc}")
    assert not refused, "\n".join(refused)


def test_the_slo_controller_config_is_valid(helm: Path) -> None:
    config_map = by_kind(objects(helm), "ConfigMap")["slo-controller-config"]
    parsed = parse_slo_config(config_map["data"])
    assert parsed.errors == {}
    assert parsed.config.colocation.enable is True


def _leaves(values: Any, path: str = "") -> list[str]:
    if isinstance(values, dict) and values:
        return [
            leaf for key, value in values.items() for leaf in _leaves(value, f"{path}.{key}" if path else key)
        ]
    return [path]


def test_the_chart_readme_lists_every_value() -> None:
    readme = (CHART / "README.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = [leaf for leaf in _leaves(values) if f"| `{leaf}` |" not in readme]
    assert not missing, missing
