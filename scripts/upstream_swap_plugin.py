"""pytest plugin: run LangGraph's own ToolNode tests with `DeviceToolNode` swapped in.

Used by ``scripts/upstream_toolnode_tests.sh``. It patches every name the tests and
``create_react_agent`` import, then checks after collection that the swap took.
"""

import sys

import langgraph.prebuilt
import langgraph.prebuilt.chat_agent_executor
import langgraph.prebuilt.tool_node

from langgraph_devsched import DeviceToolNode

for module in (
    langgraph.prebuilt,
    langgraph.prebuilt.tool_node,
    langgraph.prebuilt.chat_agent_executor,
):
    module.ToolNode = DeviceToolNode  # type: ignore[attr-defined]


def pytest_collection_finish(session):  # type: ignore[no-untyped-def]
    swapped = [
        name
        for name, mod in sys.modules.items()
        if name.startswith("tests.") and getattr(mod, "ToolNode", None) is DeviceToolNode
    ]
    stale = [
        name
        for name, mod in sys.modules.items()
        if name.startswith("tests.")
        and getattr(mod, "ToolNode", DeviceToolNode) is not DeviceToolNode
    ]
    if stale:
        raise RuntimeError(f"ToolNode not swapped in: {stale}")
    print(f"\nDeviceToolNode swapped in for ToolNode in {len(swapped)} test modules: {swapped}")
