"""Bearer tokens for the write API. The operator creates them (`cubinforge token add`);
the database keeps only their sha256, so a leaked database does not leak a token."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import select
from sqlalchemy.orm import Session

from .errors import APIError
from .models import ApiToken

bearer = HTTPBearer(auto_error=False, description="a token from `cubinforge token add NAME`")
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="cubinforge"'}


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(s: Session, name: str) -> str:
    """Store a new token for `name` (replacing a revoked one) and return it; it is shown only once."""
    token = "cf_" + secrets.token_urlsafe(32)
    row = s.scalar(select(ApiToken).where(ApiToken.name == name))
    if row is not None and not row.revoked:
        raise ValueError(f"a token named {name!r} exists; revoke it first (`cubinforge token revoke {name}`)")
    if row is None:
        row = ApiToken(name=name, token_sha256=hash_token(token))
        s.add(row)
    else:
        row.token_sha256, row.revoked = hash_token(token), False
    s.commit()
    return token


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
        pass


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
    return Writer(row.name)
