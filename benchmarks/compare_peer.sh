#!/usr/bin/env bash
# Measures the peer (AdapterHub `adapters`) and hub in one sitting on the same synthetic data and
# prints the ratios the base issue asks for. Needs /tmp/anchor-venv
# (../shared/bench/setup_anchor_venv.sh) and this repo's .venv.
#   bash benchmarks/compare_peer.sh [DATA_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${SHARED:-../shared/bench}
PEER=${ANCHOR_VENV:-/tmp/anchor-venv}/bin/python
D=${1:-$(mktemp -d)}
[ -f "$D/train.tsv" ] || python3 "$SHARED/synth.py" "$D"
export HF_HUB_OFFLINE=1 HUB_HOME=${HUB_HOME:-$(mktemp -d)}
R=$(mktemp -d)

"$PEER" "$SHARED/anchor_adapters.py" --train "$D/train.tsv" --dev "$D/dev.tsv" | tail -1 >"$R/peer_adapter.json"
"$PEER" "$SHARED/anchor_adapters.py" --train "$D/train.tsv" --dev "$D/dev.tsv" --full-finetune | tail -1 >"$R/peer_full.json"
.venv/bin/python benchmarks/bench_train.py --train "$D/train.tsv" --dev "$D/dev.tsv" | tail -1 >"$R/hub_adapter.json"
.venv/bin/python benchmarks/bench_train.py --train "$D/train.tsv" --dev "$D/dev.tsv" --precision fp32 | tail -1 >"$R/hub_adapter_fp32.json"
.venv/bin/python benchmarks/bench_train.py --train "$D/train.tsv" --dev "$D/dev.tsv" --full-finetune | tail -1 >"$R/hub_full.json"

# whole-process predict on one sentence (best of 3 each)
"$PEER" benchmarks/peer_predict.py "$R/peer-adapter" --save
.venv/bin/hub train --train "$D/train.tsv" --out "$R/hub-adapter" --epochs 1 --max-length 64 --quiet >/dev/null
best() { local b=999; for _ in 1 2 3; do local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N)
  b=$(python3 -c "print(min($b, $e - $s))"); done; echo "$b"; }
peer_s=$(best "$PEER" benchmarks/peer_predict.py "$R/peer-adapter" "a gripping, beautifully acted film")
hub_s=$(best .venv/bin/hub predict "$R/hub-adapter" "a gripping, beautifully acted film")

python3 - "$R" "$peer_s" "$hub_s" <<'PY'
import json, sys
r, peer_s, hub_s = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
load = lambda n: json.load(open(f"{r}/{n}.json"))
pa, pf, ha, hf = load("peer_adapter"), load("peer_full"), load("hub_adapter"), load("hub_full")
h32 = load("hub_adapter_fp32")
for n, row in (("peer adapter", pa), ("peer full", pf), ("hub adapter", ha),
               ("hub adapter fp32", h32), ("hub full", hf)):
    print(f"{n:16s} {json.dumps(row)}")
speed = lambda row: row["train_examples_per_s"]
print(f"train throughput hub adapter / peer adapter : {speed(ha) / speed(pa):.2f}x  (target >= 2.5x; hub precision {ha['precision']})")
print(f"  the same with hub forced to fp32          : {speed(h32) / speed(pa):.2f}x")
print(f"train throughput hub adapter / hub full     : {speed(ha) / speed(hf):.2f}x  (target >= 1.0x, both {hf['precision']})")
print(f"inference slowdown, adapter vs bare base    : {100 * ha['adapter_infer_slowdown']:.1f}%  (target <= 10%)")
print(f"dev accuracy hub adapter {ha['dev_accuracy']}, peer adapter {pa['dev_accuracy']}")
print(f"predict one sentence, whole process         : hub {hub_s:.2f}s, peer {peer_s:.2f}s  (target: hub faster)")
PY
