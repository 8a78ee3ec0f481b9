"""Data tools: vector search, a tabular model, and a transfer-dominated archive scan.

``scan_archive`` is built so that host<->device transfer dominates on a real GPU: it samples a
large host buffer (32 MB small, 512 MB full) at a stride. The CPU path reads only the sampled
elements; the GPU path must first copy the whole buffer to the device (as a tool that ships a
loaded file to the GPU would), then reduce there. Both give the same exact checksum.

>>> t = {t.name: t for t in tools("small")}
>>> t["scan_archive"].invoke({"stride": 1_000_000})
'{"elements": 9, "checksum": 37362, "mb_scanned": 32.0}'
"""

from __future__ import annotations

import json
import zlib
from typing import Annotated, Any

from langchain_core.tools import BaseTool, tool

from langgraph_devsched.device import InjectedDevice
from langgraph_devsched.models import ResidentModel
from langgraph_devsched.profiling.transfer import to_device
from langgraph_devsched.suite._common import (
    SuiteSize,
    check_size,
    finish,
    generator,
    host_cached,
    require_torch,
    suite_model,
)

_CORPUS = {"small": (100_000, 128), "full": (1_000_000, 256)}  # vectors, dimensions
_TABULAR = {"small": (2048, 64, 256), "full": (100_000, 64, 512)}  # rows, features, hidden
ARCHIVE_ELEMENTS = {"small": 8 * 2**20, "full": 128 * 2**20}  # int32: 32 MB, 512 MB
ARCHIVE_MODULUS = 9973
"""``scan_archive``'s element ``i`` is ``i % ARCHIVE_MODULUS``."""
WEIGHTS_MB: dict[str, dict[SuiteSize, float]] = {
    "vector-index": {"small": 49, "full": 977},
    "tabular-mlp": {"small": 1, "full": 3},
}
"""Declared resident bytes per model and size, rounded up to the MB: the search corpus
(``vector-index``, float32 vectors x dimensions) and the MLP's parameters."""


def _corpus(size: SuiteSize) -> Any:
    torch = require_torch()
    n, d = _CORPUS[size]
    return torch.nn.functional.normalize(torch.randn(n, d), dim=1)


def index_model(size: SuiteSize) -> ResidentModel[Any]:
    """The search corpus, resident on the device like a loaded index (`vector_search`)."""
    return suite_model(f"vector-index:{size}", lambda: _corpus(size),
                       WEIGHTS_MB["vector-index"][size])


def _query_vector(query: str, corpus_cpu_row: Any, dim: int) -> Any:
    torch = require_torch()
    if corpus_cpu_row is not None:
        noise = torch.randn(dim, generator=generator(7)) * 0.01
        return corpus_cpu_row + noise
    return torch.randn(dim, generator=generator(zlib.crc32(query.encode())))


def search(query: str, k: int, size: SuiteSize, device: str) -> dict[str, Any]:
    """Cosine top-k over a device-resident corpus (built once, like a loaded index).

    A query ``"doc:<i>"`` searches near corpus vector ``i`` (so the answer is checkable).
    """
    torch = require_torch()
    n, d = _CORPUS[size]
    corpus = index_model(size).get(device)
    row = None
    if query.startswith("doc:") and query[4:].isdigit() and int(query[4:]) < n:
        row = corpus[int(query[4:])].cpu()  # the same values as the host copy
    q = torch.nn.functional.normalize(_query_vector(query, row, d), dim=0)
    with torch.inference_mode():
        scores = corpus @ to_device(q, device)
        top = scores.topk(max(1, min(k, 50)))
    return {
        "corpus": n,
        "ids": top.indices.tolist(),
        "scores": [round(float(s), 4) for s in top.values],
    }


def _mlp(size: SuiteSize) -> Any:
    torch = require_torch()
    nn = torch.nn
    _, features, hidden = _TABULAR[size]
    return nn.Sequential(
        nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 3),
    )


def mlp_model(size: SuiteSize) -> ResidentModel[Any]:
    """The tabular classifier (`tabular_predict`)."""
    return suite_model(f"tabular-mlp:{size}", lambda: _mlp(size),
                       WEIGHTS_MB["tabular-mlp"][size])


def tabular(seed: int, size: SuiteSize, device: str) -> dict[str, Any]:
    """A 4-layer MLP over a seeded table; returns predicted class counts and mean confidence."""
    torch = require_torch()
    rows, features, _ = _TABULAR[size]
    model = mlp_model(size).get(device)
    table = torch.randn(rows, features, generator=generator(seed))
    with torch.inference_mode():
        probs = model(to_device(table, device)).softmax(-1)
        conf, label = probs.max(-1)
        counts = torch.bincount(label, minlength=3).tolist()
    return {"rows": rows, "class_counts": counts, "mean_confidence": round(float(conf.mean()), 4)}


def _archive(size: SuiteSize) -> Any:
    torch = require_torch()
    return (torch.arange(ARCHIVE_ELEMENTS[size], dtype=torch.int64) % ARCHIVE_MODULUS).int()


def scan(stride: int, offset: int, size: SuiteSize, device: str) -> dict[str, Any]:
    """Exact checksum of ``archive[offset::stride]`` (on a GPU: copy all of it, then reduce)."""
    torch = require_torch()
    archive = host_cached("archive", size, lambda: _archive(size))  # always host memory
    stride = max(1, int(stride))
    offset = max(0, min(int(offset), archive.shape[0] - 1))
    data = archive if device == "cpu" else to_device(archive, device)
    sample = data[offset::stride]
    total = int(sample.to(torch.int64).sum())
    return {
        "elements": int(sample.shape[0]),
        "checksum": total,
        "mb_scanned": round(archive.nelement() * archive.element_size() / 2**20, 1),
    }


def tools(size: str = "small") -> list[BaseTool]:
    """The three data tools at ``size``."""
    sz = check_size(size)
    full = sz == "full"

    @tool
    def vector_search(
        query: str, k: int = 5, device: Annotated[str, InjectedDevice] = "cpu"
    ) -> str:
        """Find the k nearest documents to `query` in the vector index ("doc:<id>": a known one)."""
        return json.dumps(search(query, k, sz, device))

    @tool
    def tabular_predict(seed: int, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Score table number `seed` with the tabular model; returns predicted class counts."""
        return json.dumps(tabular(seed, sz, device))

    @tool
    def scan_archive(
        stride: int = 4096, offset: int = 0, device: Annotated[str, InjectedDevice] = "cpu"
    ) -> str:
        """Checksum every `stride`-th record of the in-memory archive, starting at `offset`."""
        return json.dumps(scan(stride, offset, sz, device))

    corpus_mb = _CORPUS[sz][0] * _CORPUS[sz][1] * 4 / 2**20
    archive_mb = ARCHIVE_ELEMENTS[sz] * 4 / 2**20
    return [
        # the corpus is the resident weights; the call's working memory is the scores
        finish(vector_search, example={"query": "doc:4242", "k": 5}, model=index_model(sz),
               vram_mb=round(corpus_mb * 0.2), gpu_share=0.3 if full else 0.1),
        finish(tabular_predict, example={"seed": 21}, model=mlp_model(sz),
               vram_mb=2000 if full else 30, gpu_share=0.6 if full else 0.1),
        finish(scan_archive, example={"stride": 4096},
               vram_mb=round(archive_mb * 1.1), gpu_share=0.05),
    ]
