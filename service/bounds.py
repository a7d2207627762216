"""Input bounds shared by the request schemas: every value a request carries must fit the column
or JSON field it ends up in, so bad input is a 422 with a message and never a database error.

- ids fit the tables' 32-bit integer keys;
- strings are valid UTF-8 without NUL bytes (PostgreSQL's text and JSONB refuse both) and no
  longer than their column;
- numbers inside JSON documents are finite and within 64 bits.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field, StrictBool

MAX_ID = 2**31 - 1  # the tables' integer primary keys
INT64 = (-(2**63), 2**63 - 1)
NO_NUL = r"^[^\x00]*$"


def _encodable(value: str) -> str:
    """Refuse what the JSON schema cannot say: lone surrogates ("\\ud800" is valid JSON, but no
    UTF-8 exists for it, so the database driver would fail on it)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("the string is not valid Unicode (lone surrogate)") from exc
    return value


def text(max_length: int, *, min_length: int = 0, pattern: str = NO_NUL, **field: Any) -> Any:
    """A str of at most `max_length` characters, no NUL bytes (or the stricter `pattern`)."""
    return Annotated[str, Field(min_length=min_length, max_length=max_length, pattern=pattern, **field),
                     AfterValidator(_encodable)]


Id = Annotated[int, Field(ge=1, le=MAX_ID)]
Int64 = Annotated[int, Field(ge=INT64[0], le=INT64[1])]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
# Values inside a custom suite's shape dict: they end up in JSONB and in the case's name.
ShapeKey = text(40, min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
ShapeValue = StrictBool | Int64 | FiniteFloat | text(100)
