"""The dev harness, apart from the product: `stress` (devsched stress: faults, probes, several
processes), `perf` (devsched perf: overhead and decision time) and `testing` (a fake LLM
server for the agentic tests). Only the CLI and the tests import these.
"""
