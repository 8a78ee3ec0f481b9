"""langgraph_devsched: schedule every LangGraph tool call on the GPU now, the GPU queue or the CPU."""
