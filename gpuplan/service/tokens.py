"""API tokens: created once, stored hashed, checked in constant time, revocable.

A token reads ``gpt_<token_id>_<secret>``. ``token_id`` (10 characters) is public: it is
stored in clear, shown by ``gpuplan serve token ls`` and written in logs instead of the
token. ``secret`` carries 256 random bits (:func:`secrets.token_urlsafe`); the database
keeps only ``sha256(pepper || salt || secret)`` with a per-token random salt and an optional
server-wide pepper (``GPUPLAN_TOKEN_PEPPER``, kept outside the database), so a stolen
database copy cannot be turned back into tokens. A slow password hash (scrypt, argon2)
is not needed: the secret is random with 256 bits of entropy, not a password a person
chose (OWASP Password Storage Cheat Sheet, "hashing vs. encryption"; NIST SP 800-63B 5.1.1.2
asks for salted one-way hashes of memorized secrets, which these are not).

Scopes: ``read`` (list and download runs and calibrations, browse the HTML pages),
``write`` (upload results, trigger a recalibration) and ``admin`` (approve runs that
failed a plausibility check). ``admin`` implies the other two.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from dataclasses import dataclass

from sqlalchemy import select

from gpuplan.errors import InputError, NotFoundError
from gpuplan.service.db import Database, TokenRow, iso_utc, utcnow

PREFIX = "gpt_"
SCOPES = ("read", "write", "admin")
DEFAULT_SCOPES = ("read", "write")
TOKEN_RE = re.compile(r"gpt_([A-Za-z0-9]{10})_([A-Za-z0-9_-]{20,128})")
TEAM_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
PEPPER_ENV = "GPUPLAN_TOKEN_PEPPER"


@dataclass(frozen=True)
class Principal:
    """Who made a request: the token's public id, its team and scopes."""

    token_id: str
    team: str
    scopes: frozenset[str]

    def allows(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes


@dataclass(frozen=True)
class TokenInfo:
    token_id: str
    team: str
    scopes: list[str]
    description: str | None
    created_at: str
    revoked_at: str | None

    def as_dict(self) -> dict[str, object]:
        return {
            "token_id": self.token_id,
            "team": self.team,
            "scopes": self.scopes,
            "description": self.description,
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
            "active": self.revoked_at is None,
        }


def parse_scopes(text: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """``"read,write"`` -> ``("read", "write")``; unknown scopes are an :class:`InputError`."""
    items = text.split(",") if isinstance(text, str) else list(text)
    scopes = [s.strip().lower() for s in items if s.strip()]
    bad = [s for s in scopes if s not in SCOPES]
    if bad or not scopes:
        raise InputError(
            f"unknown scope(s) {', '.join(bad) or '(none given)'}",
            hint=f"use a comma-separated list of {', '.join(SCOPES)}",
        )
    return tuple(s for s in SCOPES if s in scopes)


def check_team(team: str) -> str:
    if not TEAM_RE.fullmatch(team or ""):
        raise InputError(
            f"invalid team name {team!r}",
            hint="use 1-100 letters, digits, '.', '_' or '-', starting with a letter or digit",
        )
    return team


def _pepper() -> bytes:
    return os.environ.get(PEPPER_ENV, "").encode()


def hash_secret(secret: str, salt_hex: str) -> str:
    """``sha256(pepper || salt || secret)`` as hex."""
    return hashlib.sha256(_pepper() + bytes.fromhex(salt_hex) + secret.encode()).hexdigest()


def create_token(
    db: Database,
    *,
    team: str,
    scopes: tuple[str, ...] = DEFAULT_SCOPES,
    description: str | None = None,
) -> tuple[str, TokenInfo]:
    """Create a token; returns the full token (shown once, never stored) and its record."""
    check_team(team)
    scopes = parse_scopes(list(scopes))
    token_id = "".join(secrets.choice(_ID_ALPHABET) for _ in range(10))
    secret = secrets.token_urlsafe(32)
    salt = secrets.token_hex(16)
    row = TokenRow(
        token_id=token_id,
        team=team,
        scopes=",".join(scopes),
        salt=salt,
        secret_sha256=hash_secret(secret, salt),
        description=(description or None),
        created_at=utcnow(),
    )
    with db.write() as s:
        s.add(row)
    return f"{PREFIX}{token_id}_{secret}", _info(row)


def verify_token(db: Database, token: str) -> Principal | None:
    """The principal of ``token``, or None when it is malformed, unknown, wrong or revoked."""
    match = TOKEN_RE.fullmatch(token or "")
    if match is None:
        return None
    token_id, secret = match.groups()
    with db.read() as s:
        row = s.scalars(select(TokenRow).where(TokenRow.token_id == token_id)).first()
        if row is None:
            # Spend the same hashing work as for a known id (no timing oracle on ids).
            hmac.compare_digest(hash_secret(secret, "00" * 16), "0" * 64)
            return None
        ok = hmac.compare_digest(hash_secret(secret, row.salt), row.secret_sha256)
        if not ok or row.revoked_at is not None:
            return None
        return Principal(
            token_id=row.token_id, team=row.team, scopes=frozenset(row.scopes.split(","))
        )


def revoke_token(db: Database, token_or_id: str) -> TokenInfo:
    """Revoke a token given its public id (or the full token); revoking twice is harmless."""
    match = TOKEN_RE.fullmatch(token_or_id)
    token_id = match.group(1) if match else token_or_id.strip()
    with db.write() as s:
        row = s.scalars(select(TokenRow).where(TokenRow.token_id == token_id)).first()
        if row is None:
            raise NotFoundError(
                f"no token with id {token_id!r}", hint="list them with 'gpuplan serve token ls'"
            )
        if row.revoked_at is None:
            row.revoked_at = utcnow()
        return _info(row)


def list_tokens(db: Database, *, team: str | None = None) -> list[TokenInfo]:
    with db.read() as s:
        q = select(TokenRow).order_by(TokenRow.created_at, TokenRow.id)
        if team:
            q = q.where(TokenRow.team == team)
        return [_info(r) for r in s.scalars(q)]


def _info(row: TokenRow) -> TokenInfo:
    return TokenInfo(
        token_id=row.token_id,
        team=row.team,
        scopes=row.scopes.split(","),
        description=row.description,
        created_at=iso_utc(row.created_at) or "",
        revoked_at=iso_utc(row.revoked_at),
    )


# a run of characters that may spell a token once percent-decoded (query strings, paths,
# double encoding: %255F is %5F is "_")
_ENCODED_RUN = re.compile(r"(?:[A-Za-z0-9_.~-]|%[0-9A-Fa-f]{2})+")


def _unquote_fully(text: str, rounds: int = 4) -> str:
    from urllib.parse import unquote

    for _ in range(rounds):
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    return text


def redact(text: str) -> str:
    """``text`` with every token's secret part replaced (defence in depth for log lines),
    whether the token appears raw or percent-encoded (once or several times over), e.g. in
    a query string or a path echoed by the access log.

    >>> redact("GET /x?t=gpt_abcdefghij_" + "s" * 43)
    'GET /x?t=gpt_abcdefghij_***'
    >>> redact("GET /x?t=gpt%5Fabcdefghij%5F" + "s" * 43)
    'GET /x?t=gpt_abcdefghij_***'
    """
    text = TOKEN_RE.sub(lambda m: f"{PREFIX}{m.group(1)}_***", text)
    if "%" not in text:
        return text

    def decode_and_redact(match: re.Match[str]) -> str:
        chunk = match.group(0)
        if "%" not in chunk:
            return chunk
        decoded = _unquote_fully(chunk)
        if not TOKEN_RE.search(decoded):
            return chunk
        return TOKEN_RE.sub(lambda m: f"{PREFIX}{m.group(1)}_***", decoded)

    return _ENCODED_RUN.sub(decode_and_redact, text)
