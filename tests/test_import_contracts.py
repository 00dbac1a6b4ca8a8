"""The import contracts in ``pyproject.toml`` mean what they say.

The real tree keeps every contract; a copy of the tree with one layer renamed, one module left
out of the layers, or one import that bypasses a layer breaks the contract that forbids it.
Each case runs ``lint-imports`` on a copy of the three packages and ``testsupport`` in a temporary directory
(about a quarter of a second per run); ``docs/architecture.md`` draws the layers.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PACKAGES = ("koordinator", "koordlet", "controlplane", "testsupport")

NODE_AGENT_APART = "node agent and control plane are independent"
SHARED_LIBRARY = "the shared library imports neither the node agent nor the control plane"
API_APART = "the API vocabulary does not import the Kubernetes client"
KUBERNETES_LOADER = "the kubernetes package is imported only by the kubeconfig loader"
TEST_SUPPORT = "the fake apiserver, envtest and the node tier serve tests only"
KOORDLET_LAYERS = "koordlet layers"
HOST_LAYER = "the host layer stays free of Kubernetes and HTTP code"
CONTROL_PLANE_LAYERS = "control-plane layers"
WEBHOOKS_APART = "koord-manager webhooks and controllers are independent"
CONTRACTS = {
    NODE_AGENT_APART,
    SHARED_LIBRARY,
    API_APART,
    KUBERNETES_LOADER,
    TEST_SUPPORT,
    KOORDLET_LAYERS,
    HOST_LAYER,
    CONTROL_PLANE_LAYERS,
    WEBHOOKS_APART,
}

RESULT = re.compile(r"^(?P<name>.+?) (?P<verdict>KEPT|BROKEN)\b", re.MULTILINE)


def lint_imports(tree: Path) -> tuple[int, dict[str, str], str]:
    """Run ``lint-imports`` on the packages under ``tree``: exit status, verdict by contract
    name, and the whole output."""
    env = {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "1000"}
    result = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", str(tree / "pyproject.toml")],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = result.stdout + result.stderr
    verdicts = {m["name"]: m["verdict"] for m in RESULT.finditer(output)}
    return result.returncode, verdicts, output


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packages' Python sources and the project's pyproject.toml, copied once."""
    tree = tmp_path_factory.mktemp("pristine")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tree / package, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy2(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


@pytest.fixture
def tree(pristine: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "tree"
    shutil.copytree(pristine, copy)
    return copy


def add_import(module: str, imported: str) -> Callable[[Path], None]:
    """A mutation: ``module`` (a dotted name) gains ``import <imported>`` at its end."""

    def mutate(tree: Path) -> None:
        path = tree.joinpath(*module.split("."))
        source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        source.write_text(source.read_text() + f"\nimport {imported}\n")

    return mutate


def add_module(module: str) -> Callable[[Path], None]:
    """A mutation: a new module ``module`` that the contracts do not place."""

    def mutate(tree: Path) -> None:
        tree.joinpath(*module.split(".")).with_suffix(".py").write_text('"""New."""\n')

    return mutate


def rename_package(old: str, new: str) -> Callable[[Path], None]:
    """A mutation: package ``old`` renamed to ``new``, every import of it rewritten, the
    contracts left as they are."""

    def mutate(tree: Path) -> None:
        tree.joinpath(*old.split(".")).rename(tree.joinpath(*new.split(".")))
        pattern = re.compile(rf"\b{re.escape(old)}\b")
        for source in tree.rglob("*.py"):
            text = source.read_text()
            if pattern.search(text):
                source.write_text(pattern.sub(new, text))

    return mutate


def test_the_tree_keeps_every_contract() -> None:
    returncode, verdicts, output = lint_imports(ROOT)
    assert returncode == 0, output
    assert verdicts == dict.fromkeys(CONTRACTS, "KEPT"), output


def test_a_copy_of_the_tree_keeps_every_contract(tree: Path) -> None:
    # the baseline of the cases below: the copy alone breaks nothing
    returncode, verdicts, output = lint_imports(tree)
    assert returncode == 0, output
    assert verdicts == dict.fromkeys(CONTRACTS, "KEPT"), output


@pytest.mark.parametrize(
    ("mutate", "broken"),
    [
        pytest.param(
            add_import("koordlet.system.paths", "koordlet.executor"),
            KOORDLET_LAYERS,
            id="system-imports-executor",
        ),
        pytest.param(
            add_import("koordlet.executor", "koordlet.metriccache"),
            KOORDLET_LAYERS,
            id="executor-imports-metriccache",
        ),
        pytest.param(
            add_import("koordlet.metriccache", "koordlet.statesinformer"),
            KOORDLET_LAYERS,
            id="metriccache-imports-statesinformer",
        ),
        pytest.param(
            add_import("koordlet.qosmanager", "koordlet.runtimehooks"),
            KOORDLET_LAYERS,
            id="qosmanager-imports-runtimehooks",
        ),
        pytest.param(
            add_import("koordlet.scrape", "koordlet.agent"), KOORDLET_LAYERS, id="scrape-imports-agent"
        ),
        pytest.param(
            add_import("koordlet.metrics", "koordlet.statesinformer"),
            KOORDLET_LAYERS,
            id="metrics-imports-statesinformer",
        ),
        pytest.param(
            add_import("koordlet._native", "koordlet.system"), KOORDLET_LAYERS, id="native-imports-system"
        ),
        pytest.param(add_module("koordlet.unplaced"), KOORDLET_LAYERS, id="koordlet-module-not-placed"),
        pytest.param(add_import("koordlet.system.paths", "aiohttp"), HOST_LAYER, id="system-imports-aiohttp"),
        pytest.param(
            add_import("koordlet.agent", "controlplane.reactor"),
            NODE_AGENT_APART,
            id="koordlet-imports-controlplane",
        ),
        pytest.param(
            add_import("koordinator.heap", "koordlet"), SHARED_LIBRARY, id="koordinator-imports-koordlet"
        ),
        pytest.param(
            add_import("koordinator.api.quantity", "koordinator.kube.client"),
            API_APART,
            id="api-imports-kube",
        ),
        pytest.param(
            add_import("koordinator.kube.client", "kubernetes"),
            KUBERNETES_LOADER,
            id="kube-client-imports-kubernetes",
        ),
        pytest.param(
            add_import("controlplane.manager.options", "kubernetes.client"),
            KUBERNETES_LOADER,
            id="manager-imports-kubernetes",
        ),
        pytest.param(
            add_import("koordlet.agent", "testsupport.fake"), TEST_SUPPORT, id="koordlet-imports-fake"
        ),
        pytest.param(
            add_import("controlplane.manager.manager", "testsupport.envtest"),
            TEST_SUPPORT,
            id="manager-imports-envtest",
        ),
        pytest.param(
            add_import("koordinator.kube.client", "testsupport.fake"),
            TEST_SUPPORT,
            id="shared-library-imports-fake",
        ),
        pytest.param(
            add_import("koordlet.agent", "testsupport.nodetier"), TEST_SUPPORT, id="koordlet-imports-nodetier"
        ),
        pytest.param(
            add_import("controlplane.scheduler", "controlplane.manager"),
            CONTROL_PLANE_LAYERS,
            id="scheduler-imports-manager",
        ),
        pytest.param(
            add_import("controlplane.reactor", "controlplane.descheduler"),
            CONTROL_PLANE_LAYERS,
            id="reactor-imports-descheduler",
        ),
        pytest.param(
            add_module("controlplane.unplaced"), CONTROL_PLANE_LAYERS, id="controlplane-module-not-placed"
        ),
        pytest.param(
            add_import("controlplane.manager.webhooks", "controlplane.manager.controllers"),
            WEBHOOKS_APART,
            id="webhooks-import-controllers",
        ),
        pytest.param(
            add_import("controlplane.manager.controllers", "controlplane.manager.webhooks"),
            WEBHOOKS_APART,
            id="controllers-import-webhooks",
        ),
    ],
)
def test_an_import_that_bypasses_a_layer_breaks_its_contract(
    tree: Path, mutate: Callable[[Path], None], broken: str
) -> None:
    mutate(tree)
    returncode, verdicts, output = lint_imports(tree)
    assert returncode != 0, output
    assert verdicts[broken] == "BROKEN", output


def test_statesinformer_may_read_the_metric_cache_as_upstream_does(tree: Path) -> None:
    add_import("koordlet.statesinformer", "koordlet.metriccache")(tree)
    returncode, verdicts, output = lint_imports(tree)
    assert returncode == 0, output
    assert verdicts == dict.fromkeys(CONTRACTS, "KEPT"), output


@pytest.mark.parametrize(
    ("old", "new"),
    [
        pytest.param("koordlet.metriccache", "koordlet.metricstore", id="koordlet-layer"),
        pytest.param("koordlet.system", "koordlet.host", id="koordlet-host-layer"),
        pytest.param("controlplane.reactor", "controlplane.workqueue", id="control-plane-layer"),
        pytest.param("testsupport.fake", "testsupport.fakes", id="test-support"),
    ],
)
def test_a_renamed_layer_fails_the_contracts(tree: Path, old: str, new: str) -> None:
    rename_package(old, new)(tree)
    returncode, _, output = lint_imports(tree)
    assert returncode != 0, output
    assert re.search(rf"\b{re.escape(old)}'? does not exist", " ".join(output.split())), output


def test_the_architecture_page_draws_every_layer_and_names_every_contract() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    page = (ROOT / "docs" / "architecture.md").read_text()
    layers = {
        name.strip()
        for contract in config["contracts"]
        if contract["type"] == "layers"
        for layer in contract["layers"]
        for name in layer.split("|")
    }
    assert sorted(name for name in layers if name not in page) == []
    assert sorted(c["name"] for c in config["contracts"] if c["name"] not in page) == []
