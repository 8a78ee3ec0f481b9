"""The one graph the harness drives: a node alone over the messages state."""

from __future__ import annotations

from typing import Any


def one_node_graph(node: Any) -> Any:
    """``node`` alone in a compiled graph over the messages state (LangGraph imported here,
    so a harness that never builds one does not pay for it)."""
    from langgraph.graph import START, MessagesState, StateGraph

    return StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
