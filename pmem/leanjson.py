"""JSON for a process that must start fast (a served agent hook): the json package's own C parts.

`import json` imports re for the patterns of its pure-Python fallbacks, and re costs a hook's
process ~14 ms of CPU before every prompt (docs/decisions/0041-hook-process-lean.md). What
json runs is in its accelerator, `_json`: the string encoders and the scanner that json.loads
itself uses, which need no re. So these give json's results: `dumps` json.dumps' default text
(separators ", " and ": ") for the plain values pmem sends (dict with str keys, list, str,
int, float, bool, None); `raw_decode` and `loads` json.JSONDecoder's. Without `_json` (another
Python) the json package's own functions are used.
"""

try:
    from _json import encode_basestring as _encode_text
    from _json import encode_basestring_ascii as _encode_ascii
    from _json import make_scanner as _make_scanner
except ImportError:  # pragma: no cover - CPython has _json
    from json.encoder import encode_basestring as _encode_text  # type: ignore[assignment]
    from json.encoder import encode_basestring_ascii as _encode_ascii  # type: ignore[assignment]
    from json.scanner import make_scanner as _make_scanner  # type: ignore[assignment]

_SPACE = " \t\n\r"  # json's whitespace
_INF = float("inf")


class _Defaults:
    """What json.JSONDecoder() hands its scanner: json.loads with no options."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": -_INF, "Infinity": _INF, "NaN": _INF - _INF}.__getitem__

    def __init__(self) -> None:
        self.memo: dict = {}  # the pure-Python scanner keeps its keys here


_scan = _make_scanner(_Defaults())


def dumps(value: object, ensure_ascii: bool = True) -> str:
    """json.dumps(value, ensure_ascii=...) for dicts with str keys, lists, tuples, str, int, float,
    bool and None; TypeError for anything else."""
    encode = _encode_ascii if ensure_ascii else _encode_text
    if isinstance(value, str):
        return encode(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if value in (_INF, -_INF):
            return "Infinity" if value > 0 else "-Infinity"
        return float.__repr__(value)
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError("leanjson.dumps: only str keys")
        return "{" + ", ".join(f"{encode(k)}: {dumps(v, ensure_ascii)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(dumps(v, ensure_ascii) for v in value) + "]"
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def raw_decode(text: str, index: int = 0) -> tuple[object, int]:
    """json.JSONDecoder().raw_decode: the JSON value that starts at `index` and where it ends;
    ValueError when none does (RecursionError for one nested too deeply, as json)."""
    try:
        return _scan(text, index)
    except StopIteration as err:
        raise ValueError(f"Expecting value: char {err.value}") from None


def loads(text: str) -> object:
    """json.loads of a str: one value, whitespace around it allowed; ValueError otherwise."""
    value, end = raw_decode(text, len(text) - len(text.lstrip(_SPACE)))
    if text[end:].strip(_SPACE):
        raise ValueError(f"Extra data: char {end}")
    return value
