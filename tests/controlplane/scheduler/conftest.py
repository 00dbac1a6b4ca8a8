"""Scheduler test fixtures: ``backend`` runs a test body on the compiled kernel and on its twin."""

from __future__ import annotations

import pytest

from controlplane.scheduler import kernel


@pytest.fixture(params=["native", "python"])
def backend(request, monkeypatch):
    if request.param == "native":
        if kernel.native() is None:
            pytest.skip("the compiled kernel is not built")
    else:
        monkeypatch.setattr(kernel, "native", lambda: None)
    return request.param
