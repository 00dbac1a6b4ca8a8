"""pytest fixtures for the chart: the real helm and the project's container image.

Loaded for the whole suite through ``pytest_plugins`` in ``tests/conftest.py``.

* ``helm`` (session): ``$KOORD_HELM_BIN/helm``, else what ``hack/helm.sh`` builds or has
  cached (helm 3 from its Go module).
* ``image_archive`` (session): ``$KOORD_IMAGE_ARCHIVE``, else what ``hack/image.sh`` builds
  from the Dockerfile without a Docker daemon.

Under CI both must be there: a missing one fails the tests that need it instead of
skipping them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _provision(env: str, script: str) -> str:
    given = os.environ.get(env)
    if given is not None:
        return given
    done = subprocess.run(["bash", str(ROOT / "hack" / script)], capture_output=True, text=True, check=False)
    lines = done.stdout.strip().splitlines()
    return lines[-1] if done.returncode == 0 and lines else ""


def _missing(message: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def helm() -> Path:
    given = _provision("KOORD_HELM_BIN", "helm.sh")
    binary = Path(given) / "helm"
    if not given or not os.access(binary, os.X_OK):
        _missing("helm unavailable: bash hack/helm.sh builds it from its Go module")
    return binary


@pytest.fixture(scope="session")
def image_archive() -> Path:
    given = _provision("KOORD_IMAGE_ARCHIVE", "image.sh")
    if not given or not Path(given).is_file():
        _missing("the project's image is unavailable: bash hack/image.sh builds it")
    return Path(given)
