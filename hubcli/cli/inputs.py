"""Texts given on the command line or stdin, as UTF-8 text or a one-line error.

Policy: bytes that are not UTF-8 are refused, never guessed at (a Latin-1 guess would silently
turn some other encoding into wrong words). The error names the text or stdin line and the
first bad byte, so `iconv` can fix the input.
"""

from __future__ import annotations

from typing import BinaryIO

from hubcli.errors import DataError, UsageError

_HINT = "give UTF-8 text (e.g. convert with `iconv -f latin1 -t utf-8`)"


def checked_texts(texts: list[str]) -> list[str]:
    """`texts` from the command line, each checked to be UTF-8 and not blank. Python hands
    over undecodable argument bytes as lone surrogates (PEP 383), which the tokenizer would
    refuse with a TypeError.

    Raises:
        UsageError: a text held bytes that are not UTF-8 (names the text and the byte), or
            nothing but spaces.
    """
    for number, text in enumerate(texts, 1):
        if not text.strip():
            raise UsageError(f"text {number} is blank", hint="give each text some words, or "
                             "leave it out")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            # surrogateescape maps byte b to U+DC00 + b
            byte = ord(text[e.start]) - 0xDC00
            raise UsageError(f"text {number} is not UTF-8: byte 0x{byte:02x} at character "
                             f"{e.start + 1}", hint=_HINT) from None
    return texts


def stdin_texts(stream: BinaryIO) -> list[str]:
    """The non-blank lines of `stream` (stdin's bytes), without their line ends.

    Raises:
        DataError: a line is not UTF-8 (names `<stdin>`, the line and the byte).
    """
    texts = []
    for number, raw in enumerate(stream, 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(f"not UTF-8 text: byte 0x{raw[e.start]:02x} at byte {e.start + 1} "
                            "of the line", path="<stdin>", line=number, hint=_HINT) from None
        if line.strip():
            texts.append(line.rstrip("\r\n"))
    return texts
