"""Device hints: validated at construction, with messages naming tool, field and valid values."""

from __future__ import annotations

from pathlib import Path

import pytest

from langgraph_devsched import DeviceToolNode, SoloProfile, ToolDeviceSpec, device_hints
from langgraph_devsched.hints import HintsError, load_hints_file
from langgraph_devsched.profiling import DeviceRun, Profile, ToolProfile, summarize
from langgraph_devsched.profiling.to_hints import profile_hints
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


def _run(device: str, samples: list[float], **extra: float) -> DeviceRun:
    return DeviceRun(device=device, latency=summarize(samples), samples_ms=samples,
                     cpu_threads=1, **extra)


def test_a_profile_json_is_accepted_as_hints_and_converted(tmp_path: Path):
    profile = Profile(
        created="2026-01-01T00:00:00+00:00", repeats=3, warmup=0, cpu_threads=1,
        devices_requested=["cpu", "cuda:0"], devices_measured=["cpu", "cuda:0"],
        tools=[
            ToolProfile(tool="asr", declared_vram_mb=900, declared_gpu_share=0.6, runs={
                "cpu": _run("cpu", [100.0, 120.0, 110.0]),
                "cuda": _run("cuda:0", [12.0, 10.0, 11.0], transfer_ms=2.5,
                             peak_vram_mb=1234.56),
            }),
            ToolProfile(tool="embed", gpu_capable=False, runs={"cpu": _run("cpu", [4.0])}),
            ToolProfile(tool="ocr", declared_vram_mb=300, skipped={"cpu": "failed: boom"}),
        ],
    )
    path = profile.save(tmp_path / "prof.json")
    node = DeviceToolNode(TOOLS, hints=path)
    assert node.device_specs == {
        "asr": ToolDeviceSpec(vram_mb=1234.6, gpu_share=0.6, profile=SoloProfile(
            cpu_ms=110.0, gpu_ms=11.0, transfer_ms=2.5)),
        "embed": ToolDeviceSpec(gpu_capable=False, profile=SoloProfile(cpu_ms=4.0)),
        "ocr": ToolDeviceSpec(vram_mb=300),  # measured nowhere: what it declared
    }
    assert load_hints_file(path) == profile_hints(profile)


def test_a_typo_inside_profile_lists_the_nested_fields():
    with pytest.raises(HintsError) as err:
        DeviceToolNode(TOOLS, hints={"asr": {"profile": {"gpu_msec": 3}}})
    assert "profile.gpu_msec: unknown field; valid fields: cpu_ms, gpu_ms, transfer_ms (got 3)" in (
        str(err.value)
    )


def test_neither_hints_nor_profile_says_both_formats(tmp_path: Path):
    path = tmp_path / "p.json"
    path.write_text('{"tools": [1, 2]}')
    with pytest.raises(HintsError, match="or a profile JSON written by `devsched profile --json`"):
        DeviceToolNode(TOOLS, hints=path)
    path.write_text('{"tools": [{"tool": "asr"}], "devices_measured": []}')
    with pytest.raises(HintsError, match="looks like a profile but is invalid: created: Field"):
        DeviceToolNode(TOOLS, hints=path)
