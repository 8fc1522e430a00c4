"""'did you mean' for every unknown key or name (config keys, config names, recipes, policies, CLI
subcommands): the one place that picks the suggestion, ``difflib.get_close_matches`` (ratio >= 0.6)."""

from __future__ import annotations

import difflib
import re
from typing import Iterable


def close_matches(word, choices: Iterable, n: int = 3, cutoff: float = 0.6) -> list[str]:
    """Up to ``n`` names of ``choices`` close to ``word`` (best first); [] when none is close."""
    choices = [str(c) for c in choices]
    word = str(word)
    found = difflib.get_close_matches(word, choices, n=n, cutoff=cutoff)
    if not found:  # a case slip (DGX_H100) is a close match whatever the ratio says
        found = [c for c in choices if c.lower() == word.lower()][:n]
    return found


def did_you_mean(word, choices: Iterable, n: int = 1) -> str:
    """``" (did you mean X?)"`` (or ``"X or Y"``) for the closest choices, else ``""``: appended to an
    error message right after the rejected name."""
    found = close_matches(word, choices, n=n)
    return f" (did you mean {' or '.join(found)}?)" if found else ""


_CHOICE = re.compile(r"expected one of (?P<choices>.+?)(?:\s*\([^()]*\))?, got (?P<q>['\"])(?P<bad>[^'\"]*)(?P=q)")


def amend(message: str) -> str:
    """A message ``"expected one of A, B or C, got 'x'..."`` (pydantic's literal errors and the
    project's hand-written ones alike) with ``" (did you mean A?)"`` after the rejected value; other
    messages unchanged. ConfigError applies it, so every choice error gets the same suggestion."""
    if "did you mean" in message:
        return message
    m = _CHOICE.search(message)
    if not m:
        return message
    choices = [c.strip().strip("'\"") for c in re.split(r",\s*|\s+or\s+", m.group("choices")) if c.strip()]
    hint = did_you_mean(m.group("bad"), [c for c in choices if c])
    return message[: m.end()] + hint + message[m.end() :] if hint else message
