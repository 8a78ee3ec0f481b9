"""Test doubles: a scripted tool-calling chat model and a few simulated AI tools."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from pydantic import Field

from langgraph_devsched import ToolParams


class ScriptedChatModel(BaseChatModel):
    """Answers with the scripted messages in order; records every prompt it received."""

    script: list[AIMessage]
    received: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: Any = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        if messages and str(messages[0].content).startswith(
                "You decide which tools a user's request needs."):  # a reading of a request
            return ChatResult(generations=[ChatGeneration(message=AIMessage('{"tools": []}'))])
        self.received.append(list(messages))
        index = min(len(self.received) - 1, len(self.script) - 1)
        return ChatResult(generations=[ChatGeneration(message=self.script[index])])


def calls(*names: str, prefix: str = "c") -> list[dict[str, Any]]:
    """Tool calls for ``names`` with ids c1, c2, ... and a text argument."""
    return [
        {"name": n, "args": {"text": f"input {i}"}, "id": f"{prefix}{i}", "type": "tool_call"}
        for i, n in enumerate(names, start=1)
    ]


@tool
def asr(text: str) -> str:
    """Transcribe audio."""
    return f"asr:{text}"


@tool
def ocr(text: str) -> str:
    """Read text from an image."""
    return f"ocr:{text}"


@tool
def embed(text: str) -> str:
    """Embed a text."""
    return f"embed:{text}"


TOOLS = [asr, ocr, embed]
HINTS = {
    "asr": {"vram_mb": 1500, "gpu_share": 0.6},
    "ocr": {"vram_mb": 3000, "gpu_share": 0.8},
    "embed": {"vram_mb": 500, "gpu_share": 0.3},
}
PARAMS = {
    "asr": ToolParams(cpu_ms=800, gpu_ms=60, transfer_ms=10, vram_mb=1500, gpu_share=0.6),
    "ocr": ToolParams(cpu_ms=300, gpu_ms=40, transfer_ms=5, vram_mb=3000, gpu_share=0.8),
    "embed": ToolParams(cpu_ms=50, gpu_ms=10, transfer_ms=30, vram_mb=500, gpu_share=0.3),
}
