#!/usr/bin/env bash
# Entity F1 of hub's tagging adapter and full fine-tuning next to the peer's (AdapterHub
# `adapters`), same CoNLL pair, same budget (3 epochs, batch 32, lr 1e-3 / 5e-5, max length 128,
# best epoch's F1 on DEV; exact span and type), over the seeds in SEEDS (default 0), one run at
# a time; with more than one seed, each side's mean and spread (max - min) at the end. THREADS
# sets OMP_NUM_THREADS for both sides alike (default: left as it is). Needs /tmp/anchor-venv
# (../shared/bench/setup_anchor_venv.sh) and this repo's .venv (HUB= another hub command).
#   SEEDS="0 1 2" THREADS=1 bash benchmarks/compare_tagging.sh TRAIN.conll DEV.conll [adapter|full|both]
# IOB1 pairs: python benchmarks/conll_to_iob1.py; a synthetic set: python benchmarks/synth_ner.py.
set -euo pipefail
cd "$(dirname "$0")/.."
TRAIN=$1 DEV=$2 MODES=${3:-both} SEEDS=${SEEDS:-0}
SHARED=${SHARED:-../shared/bench}
PEER=${ANCHOR_VENV:-/tmp/anchor-venv}/bin/python
HUB=${HUB:-.venv/bin/hub}
export HF_HUB_OFFLINE=1 HUB_HOME=${HUB_HOME:-$(mktemp -d)}
[ -n "${THREADS:-}" ] && export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
R=$(mktemp -d)

run_mode() {  # $1: adapter|full
  local flag=(); [ "$1" = full ] && flag=(--full-finetune)
  for seed in $SEEDS; do
    "$PEER" "$SHARED/anchor_tagging.py" --train "$TRAIN" --dev "$DEV" --seed "$seed" "${flag[@]}" \
      | tail -1 >"$R/peer_$1_$seed.json"
    $HUB train --task tagging --format conll --train "$TRAIN" --validation "$DEV" \
      --out "$R/hub-$1-$seed" --epochs 3 --batch-size 32 --max-length 128 --seed "$seed" \
      --quiet --json "${flag[@]}" >"$R/hub_$1_$seed.json"
  done
  python3 - "$R" "$1" $SEEDS <<'PY'
import json, statistics, sys
r, mode, *seeds = sys.argv[1:]
def f1(side, seed):
    out = json.load(open(f"{r}/{side}_{mode}_{seed}.json"))
    return out["best_epoch_f1"] if side == "peer" else out["history"][out["best_epoch"] - 1]["f1"]
rows = {side: [f1(side, seed) for seed in seeds] for side in ("hub", "peer")}
for seed, hub, peer in zip(seeds, rows["hub"], rows["peer"]):
    print(f"{mode:8s} seed {seed}  entity F1  hub {hub:.4f}  peer {peer:.4f}  "
          f"(hub - peer {hub - peer:+.4f})")
if len(seeds) > 1:
    hub, peer = (statistics.mean(rows[s]) for s in ("hub", "peer"))
    spread = {s: max(rows[s]) - min(rows[s]) for s in rows}
    print(f"{mode:8s} mean of {len(seeds)}  hub {hub:.4f} (spread {spread['hub']:.4f})  "
          f"peer {peer:.4f} (spread {spread['peer']:.4f})  (hub - peer {hub - peer:+.4f})")
PY
}

case $MODES in
  both) run_mode adapter; run_mode full ;;
  adapter|full) run_mode "$MODES" ;;
  *) echo "modes: adapter, full or both" >&2; exit 2 ;;
esac
