"""Rewrite a CoNLL file's IOB2 tags as IOB1 (the CoNLL-2003 scheme): an entity starts with I-X,
and B-X only where it directly follows another X entity. Other columns and blank lines are kept.

    python benchmarks/conll_to_iob1.py IN.conll OUT.conll
"""
import sys


def to_iob1(tags: list[str]) -> list[str]:
    out, previous = [], "O"
    for tag in tags:
        if tag.startswith("B-") and previous[2:] != tag[2:]:
            tag = "I-" + tag[2:]  # no X entity right before it: IOB1 opens with I-
        out.append(tag)
        previous = tag
    return out


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
