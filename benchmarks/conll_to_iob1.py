"""Rewrite a CoNLL file's IOB2 tags as IOB1 (the CoNLL-2003 scheme): an entity starts with I-X,
and B-X only where it directly follows another X entity. Other columns and blank lines are kept.

    python benchmarks/conll_to_iob1.py IN.conll OUT.conll
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from hubcli.tasks.conll import to_iob1  # noqa: E402


def main(src: str, dst: str) -> None:
    lines = open(src, encoding="utf-8").read().split("\n")
    out, block = [], []
    for line in [*lines, ""]:
        parts = line.split()
        if parts and parts[0] != "-DOCSTART-":
            block.append(parts)
            continue
        tags = to_iob1([p[-1] for p in block])
        out += ["\t".join([*p[:-1], t]) for p, t in zip(block, tags)]
        block = []
        out.append(line)
    with open(dst, "w", encoding="utf-8") as f:
        f.write("\n".join(out[:-1]).rstrip("\n") + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:3])
