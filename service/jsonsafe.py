"""Parsing an untrusted JSON body into values every later step can handle, or a clear 422.

`json.loads` accepts what the rest of the service cannot: NaN and Infinity (and 1e999, which
becomes inf), lone surrogates ("\\ud800", which UTF-8 cannot encode, so canonical_json and the
database fail), NUL characters (PostgreSQL text refuses them) and nesting deep enough to
exhaust the recursion limit of the encoder. Each is refused here with what is wrong and where.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_DEPTH = 32  # a manifest's deepest real value is 5 levels down


class UnsafeJSON(ValueError):
    pass


def _no_constant(name: str):
    raise UnsafeJSON(f"{name} is not valid JSON: numbers must be finite")


def loads(raw: bytes | str) -> Any:
    try:
        doc = json.loads(raw, parse_constant=_no_constant)
    except UnsafeJSON:
        raise
    except RecursionError:
        raise UnsafeJSON(f"JSON is nested too deeply (the limit is {MAX_DEPTH} levels)") from None
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
        raise UnsafeJSON(f"request body is not valid JSON: {e}") from None
    check(doc)
    return doc


def check(doc: Any) -> None:
    """Raise UnsafeJSON naming the first value the service could not store or hash."""
    stack = [(doc, "body", 0)]
    while stack:
        v, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise UnsafeJSON(f"{where}: nested more than {MAX_DEPTH} levels deep")
        if isinstance(v, str):
            _check_str(v, where)
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise UnsafeJSON(f"{where}: {v} is not a finite number")
        elif isinstance(v, dict):
            for k, x in v.items():
                _check_str(k, f"{where} (a key)")
                stack.append((x, f"{where}.{k}"[:200], depth + 1))
        elif isinstance(v, list):
            stack.extend((x, f"{where}[{i}]"[:200], depth + 1) for i, x in enumerate(v))


def _check_str(s: str, where: str) -> None:
    if "\x00" in s:
        raise UnsafeJSON(f"{where}: text contains a NUL character (\\u0000), which cannot be stored")
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise UnsafeJSON(f"{where}: text contains a lone surrogate (such as \\ud800), which is not "
                         "valid Unicode; send UTF-8 text") from None
