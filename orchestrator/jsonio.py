"""Reading JSON through orjson: status and collect parse thousands of records, a manifest of megabytes and the
fingerprint cache, and orjson does it several times faster than the standard library. It refuses NaN and
Infinity, which Python's json writes for such floats, so those documents go through json."""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(data: bytes | str) -> Any:
    """Raises ValueError (json.JSONDecodeError) on a document neither parser reads."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)
