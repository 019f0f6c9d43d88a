# vaultmem tasks. Quick start: `pip install rust-just && just demo` / `pip install rust-just && just test`.
set shell := ["bash", "-euo", "pipefail", "-c"]

venv := ".venv"
py := venv / "bin/python"

# Create .venv and install vaultmem with its dev tools and the agent extras (MCP server, Anthropic memory
# tool), torch 2.13.0 CPU first, so nothing pulls CUDA; and Debian's chromium for the dashboard's browser
# tests when it is missing (apt-get, through sudo when not root; the playwright package of the dev extras
# drives it and never downloads a browser).
setup:
    test -x /usr/bin/chromium || { as=$([ "$(id -u)" -eq 0 ] || echo sudo); $as apt-get update -qq; $as env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; }
    test -x {{py}} || python3 -m venv {{venv}}
    {{py}} -m pip install -q --disable-pip-version-check torch==2.13.0
    {{py}} -m pip install -q --disable-pip-version-check -e '.[dev,mcp,anthropic]'

# The whole test suite, real model and real observers included.
test: setup
    {{py}} -m pytest -q

# Unit tests only (skips tests marked slow).
test-fast: setup
    {{py}} -m pytest -q -m "not slow"

lint: setup
    {{venv}}/bin/ruff check vaultmem tests bench tools
    {{venv}}/bin/ruff format --check vaultmem tests bench tools
    {{venv}}/bin/mypy
    MYPYPATH=bench {{venv}}/bin/mypy --no-namespace-packages bench/*.py

fix: setup
    {{venv}}/bin/ruff check --fix vaultmem tests bench tools
    {{venv}}/bin/ruff format vaultmem tests bench tools

# Regenerate the --help blocks of docs/cli.md from the code (tests/test_cli_docs.py checks them).
docs: setup
    {{venv}}/bin/cog -r docs/cli.md

# Demo on a copy of sample_vault/: rebuild the index from the files, ingest new input, compact, show the tree,
# search, context, topics, a daily digest, stats.
demo: setup
    rm -rf demo_vault && cp -r sample_vault demo_vault
    {{venv}}/bin/vaultmem reindex --vault demo_vault
    {{venv}}/bin/vaultmem ingest docs/examples/today.jsonl --source assistant-chat --wait --vault demo_vault
    {{venv}}/bin/vaultmem compact --dry-run --vault demo_vault
    {{venv}}/bin/vaultmem compact --vault demo_vault
    {{venv}}/bin/vaultmem show --vault demo_vault
    {{venv}}/bin/vaultmem tree --query "Kyoto trip budget" --vault demo_vault
    {{venv}}/bin/vaultmem search "when is the Tidepool patch due" --limit 3 --vault demo_vault
    {{venv}}/bin/vaultmem search "雾凇拼音" --limit 2 --vault demo_vault
    {{venv}}/bin/vaultmem context "what should I know before the Kyoto trip?" --budget 300 --vault demo_vault
    {{venv}}/bin/vaultmem topics --limit 8 --vault demo_vault
    {{venv}}/bin/vaultmem topic Kyoto --limit 3 --vault demo_vault
    {{venv}}/bin/vaultmem digest 2026-03-09 --vault demo_vault
    {{venv}}/bin/vaultmem search "what did Diego say on 17 March 2026?" --limit 3 --vault demo_vault
    {{venv}}/bin/vaultmem stats --vault demo_vault
    {{venv}}/bin/vaultmem check --vault demo_vault

# Rebuild sample_vault/ from docs/examples/ (same input, same files, except each leaf's `ingested:` stamp: when it was learned).
sample: setup
    rm -rf sample_vault && {{venv}}/bin/vaultmem init sample_vault
    cp docs/examples/config.toml sample_vault/.vaultmem/config.toml
    {{venv}}/bin/vaultmem ingest docs/examples/assistant-chat.jsonl --source assistant-chat --vault sample_vault
    {{venv}}/bin/vaultmem ingest docs/examples/team-slack.json --vault sample_vault
    {{venv}}/bin/vaultmem ingest docs/examples/notes --source notes --vault sample_vault
    {{venv}}/bin/vaultmem ingest docs/examples/mail --source mail --wait --vault sample_vault
    {{venv}}/bin/vaultmem compact --vault sample_vault
    rm -rf sample_vault/.vaultmem/locks
    rm -f sample_vault/.vaultmem/chunks.db* sample_vault/.vaultmem/write.lock

# Benchmarks (figures printed as tables). Retrieval: `{{py}} bench/retrieval.py PATH/TO/locomo_dev.json`.
bench: setup
    {{py}} bench/ingest.py
    {{py}} bench/reindex.py
    {{py}} bench/scale.py
