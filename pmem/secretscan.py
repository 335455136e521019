"""Machine secrets kept out of memory: cloud and API keys, tokens, private keys, JWTs, passwords
inside URLs and connection strings.

Memories are recalled into prompts that users paste or pipe into LLMs, so a key stored by
accident leaks later. Only high-confidence shapes count: a vendor prefix with the key's length
and alphabet, a PEM private-key header, a password between `user:` and `@host`. A sentence about a
password ("the wifi password is hunter2") is the user's own choice and passes, and so do hex ids,
git hashes and UUIDs, which look random but are no secret.

(Not named `secrets.py`: a module never shadows the standard library here.)
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from .errors import UsageError


class SecretFound(UsageError):
    """Text to be stored contains what looks like a machine secret (exit 2)."""


@dataclass(frozen=True)
class Secret:
    kind: str   # "AWS access key", "GitHub token", ...
    start: int
    end: int

    def hint(self, text: str) -> str:
        """The first characters only, enough to find it in the input without showing it."""
        found = text[self.start:self.end]
        return found[:min(6, max(3, len(found) // 5))] + "…"


def _mixed(token: str) -> bool:
    """Random-looking: digits and letters of both cases (real keys; not words-with-dashes)."""
    return (any(c.isdigit() for c in token) and any(c.islower() for c in token)
            and any(c.isupper() for c in token))


def _real_password(password: str) -> bool:
    """Not a placeholder: `***`, `xxx`, `${PGPASSWORD}`, `<password>`, `%s`, `password`."""
    p = password.strip()
    if len(p) < 3 or set(p) <= set("*x.X•-_"):
        return False
    if p[0] in "$<{%[(:" or p.lower() in {"password", "passwd", "pass", "pwd", "secret", "changeme",
                                         "yourpassword", "mypassword", "<password>"}:
        return False
    return True


_Check = Callable[[re.Match], bool]
# Words that make `password=...` a connection string rather than prose (defined before the patterns use it).
# JDBC writes `;user=sa;password=...`: a bare `user=` counts where a `;` sets it off.
_CONN_KEYS = (r"(?i)(?:(?:^|[;\s\"'])(?:server|data source|host|user id|uid|username|database|databasename|"
              r"initial catalog)|;\s*user)\s*=")

# (kind, literals one of which the text must contain ("~": any case), pattern, extra check). The
# literals are a cheap pre-test (one alternation scan): a pattern starting with \b has no literal
# prefix for re to skip ahead with: all 16 on every text took 1.5 s for LoCoMo's 16,139 strings
# (0 found), the pre-test 0.2 s. They compile on the first scan, not on import: every command
# imports the store and most only read (compiling them was ~3 ms of each command's start).
_PATTERNS: list[tuple[str, tuple[str, ...], str, _Check | None]] = [
    ("private key", ("PRIVATE KEY",), r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----", None),
    ("AWS access key", ("AKIA", "ASIA", "ABIA", "ACCA"), r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b", None),
    ("AWS secret key", ("~secret",),
     r"(?i)aws_?secret_?access_?key[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])", None),
    ("GitHub token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
     r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{50,})\b", None),
    ("GitLab token", ("glpat-",), r"\bglpat-[A-Za-z0-9_-]{20,}", None),
    ("Slack token", ("xox",), r"\bxox[abposre]-[A-Za-z0-9-]{10,}", None),
    ("Slack webhook", ("hooks.slack.com",),
     r"https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9/_-]{20,}", None),
    ("Anthropic API key", ("sk-ant-",), r"\bsk-ant-[A-Za-z0-9_-]{32,}", None),
    ("OpenAI API key", ("sk-",), r"\bsk-(?!ant-)(?:proj-|svcacct-|admin-|None-)?([A-Za-z0-9_-]{32,})",
     lambda m: _mixed(m.group(1))),
    ("Stripe key", ("k_live_", "k_test_"), r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}\b", None),
    ("Google API key", ("AIza",), r"\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])", None),
    ("Hugging Face token", ("hf_",), r"\bhf_([A-Za-z0-9]{30,})\b", lambda m: _mixed(m.group(1))),
    ("npm token", ("npm_",), r"\bnpm_[A-Za-z0-9]{36}\b", None),
    ("JSON Web Token", ("eyJ",),
     r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{16,}", None),
    # user:password@host, and :password@host (redis://:pass@host: a password without a user)
    ("password in a URL", ("://",),
     r"\b[A-Za-z][A-Za-z0-9+.-]{1,20}://[^\s:/?#@'\"]*:([^\s/?#@'\"]+)@[^\s/?#@]+",
     lambda m: _real_password(m.group(1))),
    # postgresql://host/db?user=app&password=...: the password as a query parameter
    ("password in a URL", ("://",),
     r"(?i)\b[a-z][a-z0-9+.-]{1,20}://[^\s'\"<>]*?[?&;](?:password|passwd|pwd)=([^&;#\s'\"<>]+)",
     lambda m: _real_password(m.group(1))),
    ("password in a connection string", ("~password", "~pwd"),
     r"(?i)(?:^|[;\s\"'])(?:password|pwd)\s*=\s*([^;\s\"']{3,})(?=;|\s|$|[\"'])",
     lambda m: _real_password(m.group(1)) and re.search(_CONN_KEYS, m.string) is not None),
]


_HINT_ANY_CASE = tuple(h[1:] for _, hints, _, _ in _PATTERNS for h in hints if h[0] == "~")


@functools.cache
def _compiled() -> tuple[re.Pattern, list[tuple[str, tuple[str, ...], re.Pattern, _Check | None]]]:
    """The literals' pre-test and the patterns, compiled once."""
    hint = re.compile("|".join(re.escape(h) for _, hints, _, _ in _PATTERNS for h in hints if h[0] != "~"))
    return hint, [(kind, hints, re.compile(pattern), check) for kind, hints, pattern, check in _PATTERNS]


def find_secrets(text: str) -> list[Secret]:
    """Every machine secret in `text`, in order of position."""
    lower = text.lower()
    hint, patterns = _compiled()
    if not hint.search(text) and not any(h in lower for h in _HINT_ANY_CASE):
        return []  # ordinary text stops here
    found = []
    for kind, hints, pattern, check in patterns:
        if not any((h[1:] in lower) if h[0] == "~" else (h in text) for h in hints):
            continue
        for m in pattern.finditer(text):
            if check is None or check(m):
                found.append(Secret(kind, m.start(), m.end()))
    return sorted(found, key=lambda s: (s.start, s.kind))


def first_secret(text: str) -> Secret | None:
    found = find_secrets(text)
    return found[0] if found else None


def refuse(text: str, *, what: str = "the text") -> None:
    """Raise SecretFound naming the kind of secret in `text`; the secret itself is not repeated."""
    secret = first_secret(text)
    if secret is not None:
        raise SecretFound(f"{what} contains what looks like a {secret.kind} ({secret.hint(text)}); "
                          "pmem keeps secrets out of memory: remove it, or pass --allow-secret "
                          "to store it anyway")


# -- every field a memory stores ----------------------------------------------------------------

_FIELD_NAMES = {"text": "the text", "tags": "a tag", "source": "the source", "thread": "the thread",
                "scope": "the scope"}


def stored_strings(memory: Any) -> Iterator[tuple[str, str]]:
    """(field, string) for every string a memory stores: its text, tags, source, thread, scope
    and every key and value of its meta, however deep ("meta.title"). A key pasted into a
    conversation's title or a `--meta` value is stored as surely as one in the text."""
    yield "text", memory.text
    for tag in memory.tags or ():
        if isinstance(tag, str):
            yield "tags", tag
    for name in ("source", "thread", "scope"):
        value = getattr(memory, name, None)
        if isinstance(value, str):
            yield name, value
    stack: list[tuple[str, Any]] = [("meta", memory.meta)]
    while stack:  # a loop, not recursion: meta may be nested deeper than Python recurses
        path, value = stack.pop()
        if isinstance(value, str):
            yield path, value
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str):
                    yield path, key
                stack.append((f"{path}.{key}", item))
        elif isinstance(value, (list, tuple)):
            stack.extend((path, item) for item in value)


def memory_secret(memory: Any, before: Any = None) -> tuple[str, str, Secret] | None:
    """The first machine secret in a field `memory` stores, as (field, string, secret); with
    `before` (the memory as it was), only strings that are new in it (an edit that keeps an
    allowed secret is not refused for it)."""
    old = {s for _, s in stored_strings(before)} if before is not None else set()
    for name, value in stored_strings(memory):
        if value in old:
            continue
        secret = first_secret(value)
        if secret is not None:
            return name, value, secret
    return None


def field_label(name: str) -> str:
    """How a message names a field of `stored_strings`: "the text", "a tag", "the meta value 'title'"."""
    if name.startswith("meta"):
        return f"the meta value {name[5:]!r}" if name != "meta" else "a meta key"
    return _FIELD_NAMES.get(name, name)


def refuse_memory(memory: Any, *, what: str | None = None, before: Any = None) -> None:
    """Raise SecretFound when a field `memory` stores holds a machine secret (see `memory_secret`),
    naming the field and the kind, never the secret."""
    found = memory_secret(memory, before)
    if found is None:
        return
    name, value, _ = found
    label = field_label(name) if name != "text" else ("the new text" if before is not None else "the text")
    refuse(value, what=f"{what}: {label}" if what and name != "text" else (what or label))
