#!/usr/bin/env bash
# Every test, on a fresh Debian or Ubuntu machine with the Rust toolchain:
# installs what the tests need when it is missing (PostgreSQL's server for
# the export tests; `ip` and `iptables` for the drills' network namespaces
# when root; Python venvs and Chromium for the API, client and console
# tests, by their own scripts), then runs
#   - `cargo test --workspace` (the unit, integration and drill tests),
#   - the HTTP API fuzzed against docs/openapi.json (.ci/api-fuzz),
#   - a Python client generated from docs/openapi.json (.ci/python-client),
#   - the operator console in headless Chromium (.ci/console-e2e),
#   - the Debian package and README's "Deploying on hosts" guide, run word
#     for word on hosts simulated by network namespaces (.ci/deploy; as
#     root only: it installs the package, then purges it).
# README's Quick start names this script; `.ci/run` calls it.
set -euo pipefail
cd "$(dirname "$0")"

if [ "$(id -u)" = 0 ]; then SUDO=(); else SUDO=(sudo); fi
need=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
if [ "$(id -u)" = 0 ]; then
    command -v ip >/dev/null || need+=(iproute2)
    command -v iptables >/dev/null || need+=(iptables)
fi
command -v python3 >/dev/null || need+=(python3 python3-venv)
command -v curl >/dev/null || need+=(curl)
if [ "$(id -u)" = 0 ]; then command -v jq >/dev/null || need+=(jq); fi
if [ ${#need[@]} -gt 0 ]; then
    echo "test.sh: installing ${need[*]} (apt-get)"
    "${SUDO[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq "${need[@]}" >/dev/null
fi

echo "test.sh: cargo test start $(date -u +%T)"
cargo test --workspace
echo "test.sh: cargo test end $(date -u +%T)"
bash .ci/api-fuzz/run
bash .ci/python-client/run
bash .ci/console-e2e/run
if [ "$(id -u)" = 0 ]; then
    bash .ci/deploy/run
else
    echo "test.sh: the package and deploy-guide test needs root (it installs the package); skipped"
fi
echo "test.sh: all passed $(date -u +%T)"
