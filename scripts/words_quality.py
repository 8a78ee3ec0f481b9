#!/usr/bin/env python
"""Node precision/recall/F1 and latency of the words forecasters on a TaskBench directory.

    python scripts/words_quality.py --taskbench ../shared/taskbench \\
        [--llm-base-url http://127.0.0.1:8080/v1 --llm MODEL] [--limit N] [--json F]

Prints one row for ``lexical`` and, with an LLM, for ``llm`` and the combinations
(``combined:max``, ``combined:mean``: lexical and the LLM's recorded forecasts, the LLM asked
once per request; a failed LLM forecast leaves lexical alone). ``--form`` picks the LLM's
answer form (``list`` or ``probabilities``). Latency of a combination is the LLM's plus
the lexical forecaster's.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from langgraph_devsched.words.base import WordsForecast
from langgraph_devsched.words.lexical import LexicalForecaster
from langgraph_devsched.words.quality import (
    CombinedForecaster,
    QualityReport,
    Recorded,
    forecast_quality,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--taskbench", required=True, help="a TaskBench domain directory")
    parser.add_argument("--llm-base-url", help="an OpenAI-compatible base URL (.../v1)")
    parser.add_argument("--llm", help="the model name (default $DEVSCHED_LLM_MODEL)")
    parser.add_argument("--limit", type=int, help="the first N usable requests")
    parser.add_argument("--timeout", type=float, default=60.0, help="LLM timeout, seconds")
    parser.add_argument("--form", default="list", choices=["list", "probabilities"])
    parser.add_argument("--json", help="write the reports (and the LLM's answers) here")
    parser.add_argument("--verbose", action="store_true", help="one line per LLM forecast")
    args = parser.parse_args(argv)

    lexical = LexicalForecaster()
    reports: list[QualityReport] = [forecast_quality(lexical, args.taskbench, limit=args.limit)]
    answers: list[dict[str, object]] = []
    if args.llm or args.llm_base_url:
        from langgraph_devsched.words.llm import LLMForecaster

        llm = LLMForecaster(args.llm, base_url=args.llm_base_url, timeout_s=args.timeout,
                            form=args.form)
        recorded: dict[str, WordsForecast] = {}

        def keep(i: int, request: object, forecast: WordsForecast) -> None:
            recorded[request.text] = forecast  # type: ignore[attr-defined]
            answers.append({"id": request.id, "truth": sorted(request.truth),  # type: ignore[attr-defined]
                            "predicted": sorted(n for n, p in forecast.probabilities.items()
                                                if p >= 0.5),
                            "latency_ms": round(forecast.latency_ms), "error": forecast.error})
            if args.verbose:
                print(json.dumps(answers[-1]), file=sys.stderr, flush=True)

        reports.append(forecast_quality(llm, args.taskbench, limit=args.limit, progress=keep))
        replay = Recorded(recorded, llm.source)
        for rule in ("max", "mean"):
            combined = CombinedForecaster(lexical, replay, rule=rule)  # type: ignore[arg-type]
            report = forecast_quality(combined, args.taskbench, limit=args.limit)
            # the replay took no time: a combination costs the LLM's latency (lexical ~1 ms)
            report = replace(report, latency_p50_ms=report.latency_p50_ms
                             + reports[1].latency_p50_ms,
                             latency_p95_ms=report.latency_p95_ms + reports[1].latency_p95_ms)
            reports.append(report)
    print(QualityReport.HEADER)
    for report in reports:
        print(report.row())
    first = reports[0]
    print(f"skipped: {first.skipped_unknown} records naming tools not in tool_desc.json, "
          f"{first.skipped_malformed} malformed")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"reports": [r.as_dict() for r in reports], "llm_answers": answers},
                      out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
