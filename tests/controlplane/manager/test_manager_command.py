"""The koord-manager command: flags, environment defaults, and failing clearly without a cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from controlplane.manager.__main__ import build_parser
from controlplane.manager.options import OptionsError, options_from_args


def parse(argv: list[str], environ: dict[str, str] | None = None):
    saved = dict(os.environ)
    try:
        for name in (
            "WEBHOOK_PORT",
            "WEBHOOK_HOST",
            "WEBHOOK_CERT_DIR",
            "POD_NAMESPACE",
            "SECRET_NAME",
            "SERVICE_NAME",
        ):
            os.environ.pop(name, None)
        os.environ.update(environ or {})
        return options_from_args(build_parser().parse_args(argv))
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_defaults_are_upstreams():
    options = parse([])
    assert options.webhook_port == 9876
    assert str(options.webhook_cert_dir) == "/tmp/koordinator-webhook-certs"
    assert (options.webhook_namespace, options.webhook_secret_name, options.webhook_service_name) == (
        "koordinator-system",
        "koordinator-webhook-certs",
        "koordinator-webhook-service",
    )
    assert (options.metrics_addr, options.health_probe_addr) == (("", 8080), ("", 8000))


def test_environment_then_flags():
    environ = {"WEBHOOK_PORT": "9443", "WEBHOOK_HOST": "10.0.0.7", "POD_NAMESPACE": "koord"}
    options = parse([], environ)
    assert (options.webhook_port, options.webhook_host, options.webhook_namespace) == (
        9443,
        "10.0.0.7",
        "koord",
    )
    assert parse(["--webhook-port", "10250"], environ).webhook_port == 10250


@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [
        pytest.param([], {"WEBHOOK_PORT": "x"}, "WEBHOOK_PORT: 'x' is not a port number", id="port"),
        pytest.param(["--webhook-cert-writer", "vault"], {}, "is not one of secret, fs", id="writer"),
        pytest.param(["--metrics-addr", "8080"], {}, "expected [host]:port", id="address"),
        pytest.param(
            ["--webhook-cert-validity", "1h", "--webhook-cert-renew-before", "2h"],
            {},
            "must be shorter",
            id="renewal",
        ),
        pytest.param(["--webhook-cert-validity", "a year"], {}, "--webhook-cert-validity", id="duration"),
    ],
)
def test_bad_options(argv, environ, message):
    with pytest.raises(OptionsError, match=message.replace("[", r"\[")):
        parse(argv, environ)


def test_metrics_and_probes_can_be_switched_off():
    options = parse(["--metrics-addr", "0", "--health-probe-addr", "0"])
    assert (options.metrics_addr, options.health_probe_addr) == (None, None)


def test_without_cluster_credentials_the_process_fails_with_one_error(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "KUBECONFIG"))}
    env["HOME"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "controlplane.manager", "--kubeconfig", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert result.returncode == 1
    assert "cannot load cluster credentials" in result.stderr
