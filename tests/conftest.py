"""Shared test fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

# --- ray: one local Ray instance for the whole session (tests marked `ray`) -------------------
# pinned to 2 CPUs, one logical GPU and a custom VRAM resource; no dashboard; shut down at the end
RAY_TEST_VRAM_MB = 8000.0


@pytest.fixture(scope="session")
def ray_local():  # type: ignore[no-untyped-def]
    """A started local Ray instance: 2 CPUs, 1 logical GPU, ``VRAM_MB`` = 8000."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install '.[ray]')")
    if not ray.is_initialized():
        ray.init(
            num_cpus=2,
            num_gpus=1,
            resources={"VRAM_MB": RAY_TEST_VRAM_MB},
            object_store_memory=100 * 2**20,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    yield ray
    ray.shutdown()


# --- end ray ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """One intra-op torch thread for a module's tests: on shared CI cores more threads
    oversubscribe and crawl (use as ``pytestmark = pytest.mark.usefixtures(...)``)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
