"""Bearer tokens for the write API. The operator creates them (`cubinforge token add`);
the database keeps only their sha256, so a leaked database does not leak a token."""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import select
from sqlalchemy.orm import Session

from cubinforge.registry.models import ApiToken

from .errors import APIError
from .schemas import FAMILY_PATTERN

bearer = HTTPBearer(auto_error=False, description="a token from `cubinforge token add NAME`")
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="cubinforge"'}


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


SCOPE_HELP = ("a scope is 'admin' (every variant), 'family:<family>' (variants of that family) or "
              "'prefix:<name prefix>' (variants whose name starts with it)")


def parse_scopes(items) -> tuple[str, ...]:
    """Validated scopes from a list or a comma-separated string; ValueError says what is wrong."""
    if isinstance(items, str):
        items = items.split(",")
    out = []
    for raw in items:
        sc = raw.strip()
        kind, _, arg = sc.partition(":")
        if sc == "admin":
            pass
        elif kind == "family" and re.fullmatch(FAMILY_PATTERN, arg):
            pass
        elif kind == "prefix" and arg and re.fullmatch(r"[A-Za-z0-9._+-]{1,128}", arg):
            pass
        else:
            raise ValueError(f"{sc!r} is not a scope: {SCOPE_HELP}")
        out.append(sc)
    if not out:
        raise ValueError(f"a token needs at least one scope: {SCOPE_HELP}")
    return tuple(dict.fromkeys(out))


def covers(scopes: tuple[str, ...], family: str, variant: str) -> bool:
    for sc in scopes:
        kind, _, arg = sc.partition(":")
        if sc == "admin" or (kind == "family" and arg == family) or (kind == "prefix" and variant.startswith(arg)):
            return True
    return False


def create_token(s: Session, name: str, scopes=("admin",)) -> str:
    """Store a new token for `name` (replacing a revoked one) and return it; it is shown only once."""
    scope_text = ",".join(parse_scopes(scopes))
    token = "cf_" + secrets.token_urlsafe(32)
    row = s.scalar(select(ApiToken).where(ApiToken.name == name))
    if row is not None and not row.revoked:
        raise ValueError(f"a token named {name!r} exists; revoke it first (`cubinforge token revoke {name}`)")
    if row is None:
        row = ApiToken(name=name, token_sha256=hash_token(token), scopes=scope_text)
        s.add(row)
    else:
        row.token_sha256, row.revoked, row.scopes = hash_token(token), False, scope_text
    s.commit()
    return token


def list_tokens(s: Session) -> list[ApiToken]:
    return list(s.scalars(select(ApiToken).order_by(ApiToken.name)))


def revoke_token(s: Session, name: str) -> bool:
    row = s.scalar(select(ApiToken).where(ApiToken.name == name))
    if row is None:
        return False
    row.revoked = True
    s.commit()
    return True


def session_dep(request: Request):
    yield from request.app.state.db.session()


@dataclass(frozen=True)
class Writer:
    """Who is writing: the token's name and what its scopes let it touch."""
    name: str
    scopes: tuple[str, ...] = ("admin",)

    def require(self, family: str, variant: str, action: str) -> None:
        """403 unless this token's scopes cover the variant."""
        if not covers(self.scopes, family, variant):
            raise APIError(403, "forbidden", f"token {self.name!r} may not {action} {variant} (family {family}): "
                           f"its scopes are {list(self.scopes)}; the operator grants more with "
                           f"`cubinforge token add NAME --scope family:{family}` (or prefix:..., admin)")


def require_writer(request: Request, creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Writer:
    """The token's holder, or a 401 saying what is missing. Needs no request body, so it runs
    before any of an upload is read; its session is closed before the route body runs."""
    if creds is None or not creds.credentials:
        raise APIError(401, "unauthorized", "this route needs a bearer token: send "
                       "'Authorization: Bearer <token>' (the operator creates one with `cubinforge token add`)",
                       headers=_CHALLENGE)
    with request.app.state.db.sessions() as s:
        row = s.scalar(select(ApiToken).where(ApiToken.token_sha256 == hash_token(creds.credentials)))
    if row is None or row.revoked:
        raise APIError(401, "unauthorized", "the bearer token is unknown or revoked", headers=_CHALLENGE)
    return Writer(row.name, parse_scopes(row.scopes or "admin"))
