"""What `openai_model` sends an OpenAI-compatible server, through an in-memory HTTP transport.

No socket is opened: ``httpx.MockTransport`` answers as a server would. The point is the wire
format llama.cpp server and friends accept: tools as functions, the same tool list on every
turn (so the server's prompt cache survives the forced turn), a forced last turn sent as
``tool_choice: "required"`` (a string) or as a ``response_format`` json_schema, a completion
token cap on every request, and no retries.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from langgraph_devsched.schedulers.agentic import AgenticScheduler, openai_model
from langgraph_devsched.schedulers.agentic.model import LONG_BUDGET_FACTOR, answer_budget
from tests.test_agentic import BATCH, VIEW, ByTool

httpx = pytest.importorskip("httpx")
pytest.importorskip("langchain_openai")


def completion(message: dict[str, Any]) -> dict[str, Any]:
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "stub",
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def function_call(name: str, args: dict[str, Any], id: str) -> dict[str, Any]:
    return {"id": id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


REPLIES = [
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [function_call("device_state", {}, "call_1")],
    },
    {"role": "assistant", "content": "asr on the GPU, embed on the CPU."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            function_call(
                "submit_mapping",
                {
                    "assignments": [
                        {"call_id": "c1", "option": "gpu_now"},
                        {"call_id": "c2", "option": "cpu"},
                    ],
                    "reason": "measured",
                },
                "call_2",
            )
        ],
    },
]


class StubServer:
    """Answers /chat/completions with the scripted replies; keeps every request body."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.timeouts: list[float] = []

    def __call__(self, request: Any) -> Any:
        assert request.url.path == "/v1/chat/completions"
        self.bodies.append(json.loads(request.content))
        self.timeouts.append(request.extensions["timeout"]["read"])
        return httpx.Response(200, json=completion(REPLIES[len(self.bodies) - 1]))


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools", [])]


@pytest.mark.parametrize("mode", ["decide", "adecide"])
async def test_the_default_consultation_is_one_request_with_a_schema_per_call(mode: str) -> None:
    """Default mode on the wire: the observations as an assistant message with tool calls
    and their tool outputs, one request, no tools bound, a json_schema with an enum per call
    id, the completion capped to the batch, within what is left of the timeout."""
    bodies: list[dict[str, Any]] = []

    def serve(request: Any) -> Any:
        bodies.append(json.loads(request.content))
        reply = {"role": "assistant", "content": '{"c1": "gpu_now", "c2": "cpu"}'}
        return httpx.Response(200, json=completion(reply))

    transport = httpx.MockTransport(serve)
    model = openai_model("stub", base_url="http://llm.invalid/v1",
                         http_client=httpx.Client(transport=transport),
                         http_async_client=httpx.AsyncClient(transport=transport))
    scheduler = AgenticScheduler(model, fallback=ByTool({"asr": "cpu", "embed": "cpu"}),
                                 guard_ratio=None, timeout_s=9)
    decision = (
        await scheduler.adecide(BATCH, VIEW) if mode == "adecide" else scheduler.decide(BATCH, VIEW)
    )
    assert dict(decision.mapping) == {"c1": "gpu_now", "c2": "cpu"} and decision.llm_calls == 1
    (body,) = bodies
    assert [m["role"] for m in body["messages"]] == [
        "system", "assistant", *["tool"] * 5, "user"]
    called = [c["function"]["name"] for c in body["messages"][1]["tool_calls"]]
    assert called == ["device_state", "step_calls", "tool_estimates", "past_outcomes",
                      "exploration_hints"]
    assert "tools" not in body and body["max_completion_tokens"] == answer_budget(2)
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["required"] == ["c1", "c2"]
    assert schema["properties"]["c1"]["enum"] == ["gpu_now", "gpu_queued", "cpu"]


@pytest.mark.parametrize("mode", ["decide", "adecide"])
async def test_the_wire_format_of_a_consultation_with_a_turn_budget(mode: str) -> None:
    server = StubServer()
    transport = httpx.MockTransport(server)
    model = openai_model(
        "stub",
        base_url="http://llm.invalid/v1",
        max_retries=0,
        http_client=httpx.Client(transport=transport),
        http_async_client=httpx.AsyncClient(transport=transport),
    )
    scheduler = AgenticScheduler(
        model, fallback=ByTool({"asr": "cpu", "embed": "cpu"}), guard_ratio=None, timeout_s=9,
        max_turns=3, answer="tool_required",
    )

    decision = (
        await scheduler.adecide(BATCH, VIEW) if mode == "adecide" else scheduler.decide(BATCH, VIEW)
    )

    assert dict(decision.mapping) == {"c1": "gpu_now", "c2": "cpu"}
    assert decision.llm_calls == 3 and decision.fallback is None
    first, second, last = server.bodies
    assert (
        tool_names(first)
        == tool_names(second)
        == [
            "device_state",
            "step_calls",
            "tool_estimates",
            "past_outcomes",
            "exploration_hints",
            "submit_mapping",
        ]
    )
    assert "tool_choice" not in first
    assert tool_names(last) == tool_names(first) and last["tool_choice"] == "required"
    assert all("response_format" not in body for body in server.bodies)
    assert all(body["max_completion_tokens"] == LONG_BUDGET_FACTOR * answer_budget(2)
               for body in server.bodies)
    assert all("timeout" not in body for body in server.bodies)
    # each request may take only what is left of the consultation's 9 s (not the model's 60 s)
    assert all(0 < t <= 9 for t in server.timeouts) and server.timeouts == sorted(
        server.timeouts, reverse=True)
    opening = ["system", "assistant", *["tool"] * 5, "user"]
    assert [m["role"] for m in first["messages"]] == opening
    assert [m["role"] for m in second["messages"]] == [*opening, "assistant", "tool"]
    assert [m["role"] for m in last["messages"]][-2:] == ["assistant", "user"]
    schema = last["tools"][-1]["function"]["parameters"]
    assert schema["required"] == ["assignments", "reason"]


JSON_ANSWER = {
    "role": "assistant",
    "content": json.dumps(
        {"assignments": [{"call_id": "c1", "option": "gpu_queued"},
                         {"call_id": "c2", "option": "cpu"}], "reason": "schema"}
    ),
}


async def test_the_json_schema_channel_keeps_the_tools_and_sends_a_response_format() -> None:
    replies = [{"role": "assistant", "content": "thinking"}, JSON_ANSWER]
    bodies: list[dict[str, Any]] = []

    def serve(request: Any) -> Any:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json=completion(replies[len(bodies) - 1]))

    transport = httpx.MockTransport(serve)
    model = openai_model(
        "stub", base_url="http://llm.invalid/v1", http_client=httpx.Client(transport=transport)
    )
    scheduler = AgenticScheduler(model, answer="json_schema", guard_ratio=None, max_turns=2,
                                 fallback=ByTool({"asr": "cpu", "embed": "cpu"}))

    decision = scheduler.decide(BATCH, VIEW)

    assert dict(decision.mapping) == {"c1": "gpu_queued", "c2": "cpu"}
    assert decision.consultation.channel == "json_schema"
    assert decision.consultation.via == "text"
    free, forced = bodies
    assert tool_names(free) == tool_names(forced) and "response_format" not in free
    assert forced["tool_choice"] == "none"
    fmt = forced["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "submit_mapping"
    schema = fmt["json_schema"]["schema"]
    assert schema["required"] == ["c1", "c2"]


def test_openai_model_never_retries_by_default() -> None:
    assert openai_model("stub", base_url="http://llm.invalid/v1").max_retries == 0
