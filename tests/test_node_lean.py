"""A node whose tools have no device hints stays as light as `ToolNode`: no GPU probe."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_unhinted_tools_never_import_torch_or_probe_cuda() -> None:
    script = textwrap.dedent(
        """
        import sys
        from langchain_core.messages import AIMessage
        from langchain_core.tools import tool
        from langgraph.graph import START, MessagesState, StateGraph
        from langgraph_devsched import DeviceToolNode

        @tool
        def shout(text: str) -> str:
            '''Upper-case a text.'''
            return text.upper()

        node = DeviceToolNode([shout])
        graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools")
        call = {"name": "shout", "args": {"text": "hi"}, "id": "1"}
        out = graph.compile().invoke({"messages": [AIMessage("", tool_calls=[call])]})
        print(out["messages"][-1].content, "torch" in sys.modules, node.history[-1].decision.reason)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "HI False forced: one allowed option per call"
