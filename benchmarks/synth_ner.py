"""A synthetic CoNLL NER set (IOB1, like CoNLL-2003) mixing short headline-like lines with long
sentences, five entity types; written to OUT/train.conll and OUT/dev.conll. Synthetic: template
text and made-up names, useful to compare trainers, not a measure of real-world quality.

    python benchmarks/synth_ner.py OUT [--train 4000] [--dev 800] [--seed 0]
"""
import argparse
import random
from pathlib import Path

FIRST = "Anna Boris Chen Dana Elif Farid Greta Hiro Ines Jonas Kofi Lena Mateo Nadia Omar Priya".split()
LAST = "Adler Baker Costa Duval Eriksen Fischer Garcia Haddad Ivanova Jensen Kowalski Lindqvist".split()
CITY = "Oslo Lima Porto Dakar Quito Hanoi Zagreb Tunis Perth Leeds Basel Malmo Austin Kyoto".split()
ORG_HEAD = "Northwind Bluepeak Ironleaf Solvay Meridian Halcyon Tessaract Vantor Quillon Arbor".split()
ORG_TAIL = ["Corp", "Group", "Bank", "Motors", "Labs", "Holdings", "United", "FC"]
EVENT = ["Open", "Cup", "Summit", "Festival", "Marathon", "Expo"]
VERBS = "said signed visited criticised praised joined left met backed sued".split()
FILLER = ("on Monday , according to a statement released by officials late in the evening , "
          "while markets remained cautious ahead of the next round of talks .").split()


def person(r):
    return [r.choice(FIRST), r.choice(LAST)] if r.random() < 0.7 else [r.choice(LAST)]


def org(r):
    # a third of the companies carry a surname, so the word alone does not give the type
    head = r.choice(LAST) if r.random() < 0.35 else r.choice(ORG_HEAD)
    return [head, r.choice(ORG_TAIL)] if r.random() < 0.6 else [head]


def event(r):
    return [r.choice(CITY), r.choice(EVENT)]


def misc(r):  # nationality-like adjectives
    return [r.choice(CITY) + "ian"]


def entity(words, kind, previous_kind):
    # IOB1: I- everywhere; B- only on the first word of an entity right after one of the same type
    first = "B" if previous_kind == kind else "I"
    return [(w, f"{first if i == 0 else 'I'}-{kind}") for i, w in enumerate(words)]


def headline(r):
    """3-6 words: scores and datelines, carrying LOC and ORG (the long sentences carry PER)."""
    shape = r.randrange(3)
    if shape == 0:
        return [*entity(org(r), "ORG", None), ("beat", "O"), *entity(org(r), "ORG", None),
                (str(r.randrange(5)), "O")]
    if shape == 1:
        return [*entity([r.choice(CITY).upper()], "LOC", None), ("1996-08-", "O"),
                (str(r.randrange(10, 31)), "O")]
    return [*entity(org(r), "ORG", None), ("in", "O"), *entity([r.choice(CITY)], "LOC", None)]


def sentence(r):
    """20-45 words: PER, ORG, MISC and EVENT mentions in running text, sometimes adjacent."""
    out = []
    while len(out) < r.randrange(20, 40):
        kind = r.choice(["PER", "PER", "ORG", "MISC", "EVENT", "LOC"])
        words = {"PER": person, "ORG": org, "MISC": misc, "EVENT": event,
                 "LOC": lambda g: [g.choice(CITY)]}[kind](r)
        out += entity(words, kind, None)
        if kind == "PER" and r.random() < 0.15:  # two people back to back: IOB1's B- case
            out += entity(person(r), "PER", "PER")
        out += [(w, "O") for w in [r.choice(VERBS), *r.sample(FILLER, r.randrange(3, 9))]]
    return out + [(".", "O")]


def write(path: Path, n: int, r: random.Random) -> None:
    blocks = []
    for _ in range(n):
        rows = headline(r) if r.random() < 0.5 else sentence(r)
        blocks.append("\n".join(f"{w} {t}" for w, t in rows))
    path.write_text("-DOCSTART- O\n\n" + "\n\n".join(blocks) + "\n", encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--train", type=int, default=4000)
    ap.add_argument("--dev", type=int, default=800)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    r = random.Random(a.seed)
    write(out / "train.conll", a.train, r)
    write(out / "dev.conll", a.dev, r)


if __name__ == "__main__":
    main()
