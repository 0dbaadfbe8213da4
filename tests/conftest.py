"""Shared fixtures: paths to the shared real traces and small synthetic runs."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_KINETO = REPO.parent / "shared" / "data" / "kineto"
TEST_DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def shared_kineto() -> Path:
    """The folder of real Kineto traces beside the checkout; skips when it is absent."""
    if not SHARED_KINETO.is_dir():
        pytest.skip(f"shared traces not present at {SHARED_KINETO}")
    return SHARED_KINETO


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked ``gpu`` unless a CUDA device is present."""
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (run on the device machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _has_gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - no torch means no GPU tests
        return False
