"""The BERT tokenizer read straight from tokenizer.json (hubcli.base.tokenizer) encodes exactly
as transformers' tokenizer does, for every way the tasks call it, on the packaged base."""

from __future__ import annotations

import random

import pytest

from hubcli.base.hashing import tokenizer_hash
from hubcli.base.load import load_tokenizer
from hubcli.base.ref import packaged_base_path
from hubcli.base.tokenizer import FastTokenizer

pytestmark = pytest.mark.integration

SEEDS = ["a gripping, beautifully acted film", "Angela Merkel visited Paris .",
         "Crème brûlée à la française, naïve café — résumé", "Ünïcödé ÀÉÎÕÜ ñ ß ø å æ œ",
         "東京タワーは美しい。北京欢迎你", "Привет, мир! Γειά σου κόσμε", "مرحبا بالعالم",
         "emoji 😀🎉👍🏽 and ZWJ 👩‍👩‍👧", "tabs\tand\nnew lines\r\n and  double  spaces",
         "control \x00\x07 chars and \u200b zero width \u00ad soft hyphen", "",
         "   ", "x" * 300, "supercalifragilisticexpialidocious " * 40,
         "U.S.A. 3.14159 $1,000,000 e-mail@example.com http://x.org/a?b=c#d",
         "don't won't ''quoted'' \"double\" «guillemets» „low“", "İstanbul ǅ ﬁ ﬂ ｆｕｌｌｗｉｄｔｈ",
         "a\u0301 e\u0300 combining marks", "[CLS] [SEP] [MASK] [PAD] [UNK] specials in text"]


def sentences(n: int = 300) -> list[str]:
    rng = random.Random(0)
    words = " ".join(SEEDS).split() or ["x"]
    out = list(SEEDS)
    while len(out) < n:
        k = rng.choice([1, 3, 12, 60, 400])
        out.append(" ".join(rng.choice(words) for _ in range(k)))
    return out


@pytest.fixture(scope="module")
def pair():
    from transformers import AutoTokenizer

    path = packaged_base_path()
    return FastTokenizer(path), AutoTokenizer.from_pretrained(path)


def test_packaged_base_loads_the_fast_tokenizer_without_transformers():
    import subprocess
    import sys

    code = ("import sys; from hubcli.base.load import load_tokenizer; "
            "from hubcli.base.ref import packaged_base_path; "
            "t = load_tokenizer(packaged_base_path()); "
            "print(type(t).__name__, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["FastTokenizer", "False"]


def test_same_hash_and_special_tokens(pair):
    fast, slow = pair
    assert tokenizer_hash(fast) == tokenizer_hash(slow)
    assert fast.pad_token_id == slow.pad_token_id
    assert fast.num_special_tokens_to_add(pair=True) == slow.num_special_tokens_to_add(pair=True)


@pytest.mark.parametrize("max_length", [16, 128])
def test_single_and_pair_ids_are_identical(pair, max_length):
    fast, slow = pair
    texts = sentences()
    # truncating a long pair makes every combination of both texts' windows (tokenizers'
    # overflow), so pairs are clipped to keep the test quick; single texts stay whole
    for a, b in zip(texts, [t[:300] for t in reversed(texts)]):
        for args in ((a,), (a, b)):
            if len(args) == 2:
                args = (args[0][:300], args[1])
            kwargs = dict(truncation=True, max_length=max_length)
            assert dict(fast(*args, **kwargs)) == dict(slow(*args, **kwargs)), args


def test_words_with_overflow_windows_are_identical(pair):
    fast, slow = pair
    for text in sentences():
        words = text.split()
        kwargs = dict(is_split_into_words=True, truncation=True, max_length=16,
                      return_overflowing_tokens=True)
        f, s = fast(words, **kwargs), slow(words, **kwargs)
        assert f["input_ids"] == s["input_ids"] and f["token_type_ids"] == s["token_type_ids"]
        assert [f.word_ids(w) for w in range(len(f["input_ids"]))] == \
               [s.word_ids(w) for w in range(len(s["input_ids"]))]


def test_question_context_windows_and_offsets_are_identical(pair):
    fast, slow = pair
    texts = sentences()
    for question, context in zip(texts[::7], texts[3::7]):
        kwargs = dict(truncation="only_second", max_length=48, stride=8,
                      return_overflowing_tokens=True, return_offsets_mapping=True)
        try:
            s = slow(question[:40], context, **kwargs)
        except Exception:  # transformers refuses some question/stride combinations; skip those
            continue
        f = fast(question[:40], context, **kwargs)
        assert f["input_ids"] == s["input_ids"]
        assert [[list(o) for o in w] for w in f["offset_mapping"]] == \
               [[list(o) for o in w] for w in s["offset_mapping"]]
        assert [f.sequence_ids(w) for w in range(len(f["input_ids"]))] == \
               [s.sequence_ids(w) for w in range(len(s["input_ids"]))]


def test_padded_batch_tensors_are_identical(pair):
    fast, slow = pair
    texts = sentences(40)
    f = fast(texts[:20], texts[20:], truncation=True, max_length=64, padding=True,
             return_tensors="pt")
    s = slow(texts[:20], texts[20:], truncation=True, max_length=64, padding=True,
             return_tensors="pt")
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        assert f[key].tolist() == s[key].tolist()


def test_load_tokenizer_picks_it_for_bert_folders():
    assert isinstance(load_tokenizer(packaged_base_path()), FastTokenizer)


@pytest.mark.parametrize("which", ["ours", "transformers'"])
def test_threads_calling_at_once_each_get_their_own_truncation(pair, which):
    """Truncation is a setting of the shared backend, set per call (hub serve's workers and
    request handlers tokenize at once): hub serve puts its tokenizer, whichever, behind a
    lock."""
    import threading

    from hubcli.serving.engine import OneCallAtATime

    fast = OneCallAtATime(pair[0] if which == "ours" else pair[1])
    long_batch = sentences(40)[20:]
    full = [len(ids) for ids in fast(long_batch)["input_ids"]]
    assert max(full) > 8
    failures: list = []

    def call(limit: int | None) -> None:
        try:
            for _ in range(150):
                got = [len(ids) for ids in fast(long_batch, truncation=limit is not None,
                                                max_length=limit)["input_ids"]]
                if got != [min(n, limit or n) for n in full]:
                    failures.append((limit, got))
        except Exception as err:  # the backend refuses a settings change during a call
            failures.append(repr(err))

    threads = [threading.Thread(target=call, args=(limit,)) for limit in (None, 8, None, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert failures == []
