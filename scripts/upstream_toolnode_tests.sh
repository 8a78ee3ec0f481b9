#!/usr/bin/env bash
# Run langgraph-prebuilt's own ToolNode tests with DeviceToolNode in place of ToolNode.
# Usage: scripts/upstream_toolnode_tests.sh [pytest args...]   (needs .venv from `make setup`)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$PWD/.venv/bin/python}
version=$($PY -c "import importlib.metadata as m; print(m.version('langgraph-prebuilt'))")
work=${UPSTREAM_DIR:-$(mktemp -d)}
if [ ! -d "$work/langgraph_prebuilt-$version" ]; then
  $PY -m pip download -q --no-binary :all: --no-deps -d "$work" "langgraph-prebuilt==$version"
  tar xzf "$work/langgraph_prebuilt-$version.tar.gz" -C "$work"
fi
cd "$work/langgraph_prebuilt-$version"
PYTHONPATH="$OLDPWD/scripts:$OLDPWD${PYTHONPATH:+:$PYTHONPATH}" \
  $PY -m pytest -p upstream_swap_plugin -q -p no:cacheprovider \
  tests/test_tool_node.py tests/test_on_tool_call.py tests/test_tool_node_interceptor_unregistered.py \
  tests/test_injected_state_not_required.py tests/test_tool_node_validation_error_filtering.py \
  tests/test_react_agent.py \
  "$@"
