"""Installed without its extras (``kubernetes``, ``nvidia-ml-py``, ``cel-python``), as a node
agent in a pod is: every entry point imports, the koordlet validates a NodeSLO (rules
skipped, logged once), GPU discovery says what is missing, and a kubeconfig is a clear
error naming the extra. Each check runs in a fresh interpreter where those packages
cannot be imported."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXTRA_PACKAGES = ("kubernetes", "pynvml", "celpy")

#: makes the extras' packages unimportable, as if they were not installed
BLOCKER = textwrap.dedent(
    f"""
    import sys
    class _NotInstalled:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {EXTRA_PACKAGES!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None
    sys.meta_path.insert(0, _NotInstalled())
    """
)


def run_without_extras(program: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", BLOCKER + textwrap.dedent(program)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_the_extras_are_not_base_dependencies():
    with open(ROOT / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    base = " ".join(project["dependencies"])
    for package in ("kubernetes", "nvidia-ml-py", "cel-python"):
        assert package not in base
    extras = project["optional-dependencies"]
    assert extras["kubeconfig"] == ["kubernetes>=31"]
    assert extras["gpu"] == ["nvidia-ml-py>=12.535"]
    assert extras["cel"] == ["cel-python>=0.5"]
    assert "koordinator-py[all]" in extras["test"]  # the lock file still pins them


def test_every_entry_point_imports_without_the_extras():
    out = run_without_extras(
        """
        import importlib, sys
        for name in ("koordlet.__main__", "koordlet.agent", "koordlet.devicedaemon.__main__",
                     "controlplane.manager.__main__", "controlplane.manager.manager"):
            importlib.import_module(name)
        extras = ("kubernetes", "pynvml", "celpy")
        print("loaded", sorted(m for m in sys.modules if m.split(".")[0] in extras))
        """
    )
    assert "loaded []" in out


def test_a_nodeslo_is_validated_without_cel_its_rules_skipped_and_said_once():
    out = run_without_extras(
        """
        import logging
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
        from koordinator.api.schema import validator_for
        validator = validator_for("slo.koordinator.sh/v1alpha1", "NodeSLO")
        base = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "n"}}
        # the rule catRangeEndPercent > catRangeStartPercent is not evaluated...
        rule_broken = {**base, "spec": {"resourceQOSStrategy": {"beClass": {"resctrlQOS": {
            "catRangeStartPercent": 50, "catRangeEndPercent": 10}}}}}
        print("rule", [str(e) for e in validator.validate(rule_broken)])
        print("rule", [str(e) for e in validator.validate(rule_broken)])
        # ...the schema still is
        typed_wrong = {**base, "spec": {"resourceQOSStrategy": {"beClass": {"resctrlQOS": {
            "catRangeStartPercent": "half"}}}}}
        print("schema", [str(e) for e in validator.validate(typed_wrong)])
        """
    )
    assert out.count("rule []") == 2
    assert "catRangeStartPercent: Invalid value" in out
    assert out.count("cel-python is not installed (install koordinator-py[cel])") == 1


def test_gpu_discovery_without_nvidia_ml_py_says_so():
    out = run_without_extras(
        """
        from koordlet.system.devices import nvml
        print(nvml.summary())
        """
    )
    assert "nvidia-ml-py is not installed (install koordinator-py[gpu])" in out


def test_a_kubeconfig_without_kubernetes_is_a_config_error_naming_the_extra(tmp_path):
    config = tmp_path / "config"
    config.write_text("apiVersion: v1\nkind: Config\ncurrent-context: c\n")
    out = run_without_extras(
        f"""
        from koordinator.kube.config import ConfigError, load_config
        try:
            load_config({str(config)!r})
        except ConfigError as err:
            print("ConfigError:", err)
        """
    )
    assert "ConfigError: a kubeconfig needs the kubernetes package, which is not installed" in out
    assert "install koordinator-py[kubeconfig], or run in a pod with in-cluster credentials" in out
