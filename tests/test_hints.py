"""Device hints: validated at construction, with messages naming tool, field and valid values."""

from __future__ import annotations

from pathlib import Path

import pytest

from langgraph_devsched import DeviceToolNode, ToolDeviceSpec, device_hints
from langgraph_devsched.hints import HintsError
from tests.fakes import TOOLS, embed


@pytest.mark.parametrize(
    ("hints", "message"),
    [
        (
            {"asr": {"vram_mb": -5}},
            r"tool 'asr':\n  vram_mb: Input should be greater than or equal to 0",
        ),
        ({"tts": {"vram_mb": 5}}, r"unknown tool\(s\) 'tts'; known tools: asr, embed, ocr"),
        (
            {"asr": {"pinned": "gpu_later"}},
            r"tool 'asr':\n  pinned: .*valid options: gpu_now, gpu_queued, cpu",
        ),
        ({"asr": {"preferred": "tpu"}}, r"preferred: .*valid options: gpu_now, gpu_queued, cpu"),
        (
            {"asr": {"gpu_capable": False, "pinned": "gpu_now"}},
            r"tool 'asr':\n  pinned='gpu_now' contradicts gpu_capable=False; valid: 'cpu'",
        ),
        (
            {"asr": {"cpu_allowed": False, "pinned": "cpu"}},
            r"pinned='cpu' contradicts cpu_allowed=False; valid: 'gpu_now', 'gpu_queued'",
        ),
        ({"asr": {"gpu_capable": False, "cpu_allowed": False}}, r"leave no device"),
        (
            {"asr": {"vram": 5}},
            r"vram: unknown field; valid fields: gpu_capable, cpu_allowed, vram_mb",
        ),
        ({"asr": {"gpu_share": 1.5}}, r"gpu_share: Input should be less than or equal to 1"),
        ({"asr": "lots"}, r"hints for tool 'asr' must be a mapping"),
    ],
)
def test_invalid_hints_fail_at_construction(hints, message):
    with pytest.raises(HintsError, match=message):
        DeviceToolNode(TOOLS, hints=hints)


def test_hints_file_yaml_and_json(tmp_path: Path):
    yaml_file = tmp_path / "hints.yaml"
    yaml_file.write_text("tools:\n  asr: {vram_mb: 1500, preferred: gpu_queued}\n")
    node = DeviceToolNode(TOOLS, hints=yaml_file)
    assert node.device_specs["asr"] == ToolDeviceSpec(vram_mb=1500, preferred="gpu_queued")
    assert node.device_specs["ocr"].allowed_options() == ("cpu",)  # no hints: runs as it is
    json_file = tmp_path / "hints.json"
    json_file.write_text('{"tools": {"ocr": {"pinned": "gpu_now"}}}')
    assert DeviceToolNode(TOOLS, hints=json_file).device_specs["ocr"].allowed_options() == (
        "gpu_now",
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("tools: [asr]", "expected a mapping with a 'tools' mapping"),
        ("tools:\n  asr: 12\n", r"tools.asr must be a mapping of fields"),
        ("tools: {asr: {vram_mb: [}", "not valid YAML/JSON"),
        ("!!python/object/apply:os.system ['echo hacked']", "not valid YAML/JSON"),
    ],
)
def test_bad_hints_files(tmp_path: Path, content: str, message: str):
    path = tmp_path / "hints.yaml"
    path.write_text(content)
    with pytest.raises(HintsError, match=message):
        DeviceToolNode(TOOLS, hints=path)


def test_non_utf8_and_missing_hints_files(tmp_path: Path):
    path = tmp_path / "hints.yaml"
    path.write_bytes(b"tools:\n  \xff\xfe: {}\n")
    with pytest.raises(HintsError, match="not UTF-8"):
        DeviceToolNode(TOOLS, hints=path)
    with pytest.raises(HintsError, match="cannot read"):
        DeviceToolNode(TOOLS, hints=tmp_path / "absent.yaml")


def test_code_hints_on_tools_and_plain_functions():
    @device_hints(vram_mb=64, preferred="cpu")
    def tokenize(text: str) -> str:
        """Split a text."""
        return text

    tagged = device_hints(vram_mb=256)(embed)
    node = DeviceToolNode([tagged, tokenize])
    assert node.device_specs["embed"].vram_mb == 256
    assert node.device_specs["tokenize"].preferred == "cpu"
    with pytest.raises(HintsError, match="<decorated tool>"):
        device_hints(vram_mb=-1)
