#!/usr/bin/env bash
# Entity F1 of hub's tagging adapter and full fine-tuning next to the peer's (AdapterHub
# `adapters`), same CoNLL pair, same budget (3 epochs, batch 32, lr 1e-3 / 5e-5, max length 128,
# seed 0, best epoch's F1 on DEV; exact span and type). Needs /tmp/anchor-venv
# (../shared/bench/setup_anchor_venv.sh) and this repo's .venv.
#   bash benchmarks/compare_tagging.sh TRAIN.conll DEV.conll [adapter|full|both]
# IOB1 pairs: python benchmarks/conll_to_iob1.py; a synthetic set: python benchmarks/synth_ner.py.
set -euo pipefail
cd "$(dirname "$0")/.."
TRAIN=$1 DEV=$2 MODES=${3:-both}
SHARED=${SHARED:-../shared/bench}
PEER=${ANCHOR_VENV:-/tmp/anchor-venv}/bin/python
export HF_HUB_OFFLINE=1 HUB_HOME=${HUB_HOME:-$(mktemp -d)}
R=$(mktemp -d)

run_mode() {  # $1: adapter|full
  local flag=(); [ "$1" = full ] && flag=(--full-finetune)
  "$PEER" "$SHARED/anchor_tagging.py" --train "$TRAIN" --dev "$DEV" "${flag[@]}" | tail -1 >"$R/peer_$1.json"
  .venv/bin/hub train --task tagging --format conll --train "$TRAIN" --validation "$DEV" \
    --out "$R/hub-$1" --epochs 3 --batch-size 32 --max-length 128 --seed 0 --quiet --json \
    "${flag[@]}" >"$R/hub_$1.json"
  python3 - "$R" "$1" <<'PY'
import json, sys
r, mode = sys.argv[1:]
peer, hub = (json.load(open(f"{r}/{side}_{mode}.json")) for side in ("peer", "hub"))
f1 = hub["history"][hub["best_epoch"] - 1]["f1"]
print(f"{mode:8s} entity F1  hub {f1:.4f}  peer {peer['best_epoch_f1']:.4f}  "
      f"(hub - peer {f1 - peer['best_epoch_f1']:+.4f})")
PY
}

case $MODES in
  both) run_mode adapter; run_mode full ;;
  adapter|full) run_mode "$MODES" ;;
  *) echo "modes: adapter, full or both" >&2; exit 2 ;;
esac
