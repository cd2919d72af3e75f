"""``gpuplan serve``: run the results service; ``gpuplan serve token``: manage its tokens."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuplan.cli._common import (
    FORMAT_OPTION,
    Format,
    emit,
    info,
    make_app,
    print_json,
    simple_table,
)

DEFAULT_DATABASE_URL = "sqlite:///gpuplan-service.db"
DATABASE_ENV = "GPUPLAN_DATABASE_URL"

SERVE_HELP = """Run the results service that pools probe results from many nodes.

Teams upload runs with 'gpuplan results upload'; the server validates them, flags values
above the catalog peaks, recalibrates after new accepted runs and serves the artifact to
'gpuplan calibrate --server URL'. Browse and compare runs at http://HOST:PORT/ (log in with
a read token). The database schema is migrated on start-up.

\b
Examples:
  gpuplan serve token create --team vision              # prints a read+write token once
  gpuplan serve --port 8000                             # SQLite file gpuplan-service.db
  gpuplan serve --database-url postgresql://gpuplan@db:5432/gpuplan --host 0.0.0.0
  gpuplan serve --ssl-certfile cert.pem --ssl-keyfile key.pem   # or behind a TLS proxy
  gpuplan serve openapi --out docs/service-openapi.json
"""

app = make_app(SERVE_HELP, single=True)
token_app = make_app(
    """Create, revoke and list API tokens (stored hashed; shown once).

\b
Examples:
  gpuplan serve token create --team vision --scope read,write
  gpuplan serve token create --team ops --scope admin --description "approves flagged runs"
  gpuplan serve token ls --team vision
  gpuplan serve token revoke 3k9x0a7bqz
"""
)
app.add_typer(token_app, name="token")

DATABASE_OPTION = typer.Option(
    DEFAULT_DATABASE_URL,
    "--database-url",
    envvar=DATABASE_ENV,
    help="sqlite:///path.db (default) or postgresql://user@host:5432/db (also $GPUPLAN_DATABASE_URL).",
)


def bind_listener(host: str, port: int):
    """A listening socket on ``host:port``, or one-line :class:`InputError` when the port is
    taken (or not ours to take). Bound here, before the database work, and handed to
    uvicorn, so that no other process can take the port in between and uvicorn's seven-line
    startup failure never shows."""
    import errno
    import socket

    from gpuplan.errors import InputError

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise InputError(
            f"cannot listen on host {host!r}: {exc.strerror}",
            hint="give an address of this machine with --host (127.0.0.1, 0.0.0.0, ::)",
        ) from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
        if family == socket.AF_INET6 and host in ("::", ""):
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise InputError(
                f"port {port} on {host} is in use: {exc.strerror}",
                hint="stop the process that holds it or choose another with --port",
            ) from None
        raise InputError(
            f"cannot listen on port {port} on {host}: {exc.strerror}",
            hint="ports below 1024 need privileges; choose another with --port, or check --host",
        ) from None
    sock.set_inheritable(True)
    return sock


def _database(url: str):
    from gpuplan.service.db import Database

    db = Database(url)
    db.migrate()
    return db


@app.callback(invoke_without_command=True)
def serve(
    ctx: typer.Context,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (0.0.0.0: all)."),
    port: int = typer.Option(8000, "--port", min=1, max=65535, help="TCP port."),
    database_url: str = DATABASE_OPTION,
    max_upload_bytes: int = typer.Option(
        16 * 2**20, "--max-upload-bytes", min=1024, help="Largest accepted upload."
    ),
    recalibrate: str = typer.Option(
        "background", "--recalibrate", help="background | sync | off: when to refit after new runs."
    ),
    ssl_certfile: Path | None = typer.Option(
        None, "--ssl-certfile", help="Serve HTTPS with this certificate."
    ),
    ssl_keyfile: Path | None = typer.Option(
        None, "--ssl-keyfile", help="Private key of --ssl-certfile."
    ),
    proxy_headers: bool = typer.Option(
        False,
        "--proxy-headers",
        help="Trust X-Forwarded-Proto/For from --forwarded-allow-ips (TLS proxy).",
    ),
    forwarded_allow_ips: str = typer.Option(
        "127.0.0.1", "--forwarded-allow-ips", help="Proxies trusted."
    ),
    log_level: str = typer.Option("info", "--log-level", help="debug | info | warning | error"),
    fmt: Format = FORMAT_OPTION,
) -> None:
    """Run the server (see the group help)."""
    if ctx.invoked_subcommand is not None:
        return
    from gpuplan.errors import InputError

    if recalibrate not in ("background", "sync", "off"):
        raise InputError(
            f"unknown --recalibrate {recalibrate!r}", hint="use background, sync or off"
        )
    if (ssl_certfile is None) != (ssl_keyfile is None):
        raise InputError(
            "--ssl-certfile and --ssl-keyfile go together", hint="give both, or neither"
        )
    for p in (ssl_certfile, ssl_keyfile):
        if p is not None and not p.is_file():
            raise InputError(f"no such file: {p}", hint="give the PEM certificate and key paths")

    import uvicorn

    from gpuplan.service.app import ServiceSettings, create_app
    from gpuplan.service.db import redact_url
    from gpuplan.service.logs import log_config

    listener = bind_listener(host, port)  # a port in use is one line, before anything else
    db = _database(database_url)  # fail early with one line if the database is unreachable
    revision = db.current_revision()
    db.dispose()
    settings = ServiceSettings(
        database_url=database_url,
        max_upload_bytes=max_upload_bytes,
        recalibrate=recalibrate,
        migrate=True,
    )
    scheme = "https" if ssl_certfile else "http"
    summary = {
        "url": f"{scheme}://{host}:{port}",
        "database": redact_url(db.url),
        "schema_revision": revision,
        "recalibrate": recalibrate,
        "max_upload_bytes": max_upload_bytes,
    }
    if fmt == Format.json:
        print_json(summary)
    else:
        info(
            f"gpuplan results service on {summary['url']} (database {summary['database']}, schema {revision})"
        )
    config = uvicorn.Config(
        create_app(settings),
        host=host,
        port=port,
        log_config=log_config(log_level),
        log_level=log_level,
        ssl_certfile=str(ssl_certfile) if ssl_certfile else None,
        ssl_keyfile=str(ssl_keyfile) if ssl_keyfile else None,
        proxy_headers=proxy_headers,
        forwarded_allow_ips=forwarded_allow_ips,
        server_header=False,
        timeout_graceful_shutdown=10,
    )
    try:
        uvicorn.Server(config).run(sockets=[listener])
    finally:
        listener.close()


@app.command("openapi")
def openapi(
    out: Path | None = typer.Option(None, "--out", "-o", help="Write here instead of stdout."),
) -> None:
    """Print (or write) the service's OpenAPI schema.

    \b
    Examples:
      gpuplan serve openapi --out docs/service-openapi.json
    """
    import json

    from gpuplan.service.app import openapi_document

    text = json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n"
    if out is None:
        typer.echo(text, nl=False)
    else:
        from gpuplan.fsio import write_atomic

        write_atomic(out, text)
        info(f"wrote {out}")


@token_app.command("create")
def token_create(
    team: str = typer.Option(..., "--team", help="Team the token uploads for."),
    scope: str = typer.Option("read,write", "--scope", help="Comma-separated: read, write, admin."),
    description: str | None = typer.Option(None, "--description", help="A note (who holds it)."),
    database_url: str = DATABASE_OPTION,
    fmt: Format = FORMAT_OPTION,
) -> None:
    """Create a token; it is printed once and only its salted hash is stored."""
    from gpuplan.service.tokens import create_token, parse_scopes

    scopes = parse_scopes(scope)
    db = _database(database_url)
    try:
        token, rec = create_token(db, team=team, scopes=scopes, description=description)
    finally:
        db.dispose()
    data = {"token": token, **rec.as_dict()}

    def table(console) -> None:
        console.print(token, soft_wrap=True, highlight=False)
        info(
            f"token {rec.token_id} for team {rec.team} ({', '.join(rec.scopes)}): shown once, store it now "
            f"(clients read it from --token or $GPUPLAN_TOKEN)"
        )

    emit(data, fmt, table)


@token_app.command("revoke")
def token_revoke(
    token_id: str = typer.Argument(
        ..., help="The token's id (from 'token ls') or the token itself."
    ),
    database_url: str = DATABASE_OPTION,
    fmt: Format = FORMAT_OPTION,
) -> None:
    """Revoke a token at once (requests with it get 401)."""
    from gpuplan.service.tokens import revoke_token

    db = _database(database_url)
    try:
        rec = revoke_token(db, token_id)
    finally:
        db.dispose()
    emit(
        rec.as_dict(),
        fmt,
        lambda console: console.print(f"revoked token {rec.token_id} (team {rec.team})"),
    )


@token_app.command("ls")
def token_ls(
    team: str | None = typer.Option(None, "--team", help="Only this team's tokens."),
    database_url: str = DATABASE_OPTION,
    fmt: Format = FORMAT_OPTION,
) -> None:
    """List tokens (ids, teams, scopes; never the secrets)."""
    from gpuplan.service.tokens import list_tokens

    db = _database(database_url)
    try:
        rows = [t.as_dict() for t in list_tokens(db, team=team)]
    finally:
        db.dispose()

    def table(console) -> None:
        console.print(
            simple_table(
                "tokens",
                ["id", "team", "scopes", "created", "revoked", "description"],
                [
                    (
                        r["token_id"],
                        r["team"],
                        ",".join(r["scopes"]),
                        r["created_at"],
                        r["revoked_at"] or "-",
                        r["description"] or "",
                    )
                    for r in rows
                ],
            )
        )

    emit({"tokens": rows}, fmt, table)
