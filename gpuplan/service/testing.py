"""Throwaway servers for the service's tests, benchmarks and local trials.

* :class:`TempPostgres`: a private PostgreSQL cluster (``initdb`` into a temporary directory,
  ``pg_ctl start`` on a free loopback port with its socket in that directory), or an
  existing server named by ``GPUPLAN_TEST_POSTGRES_URL``; :meth:`TempPostgres.new_database`
  hands out a fresh empty database per test.
* :class:`LiveServer`: ``gpuplan serve`` as a real subprocess (uvicorn) on a free port, that
  can be killed with SIGKILL and restarted on the same port and database.

Nothing here is imported by the service itself.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from gpuplan.errors import EnvironmentProblem

POSTGRES_URL_ENV = "GPUPLAN_TEST_POSTGRES_URL"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(
    host: str, port: int, timeout_s: float = 30.0, proc: subprocess.Popen | None = None
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(
                f"process exited with code {proc.returncode} before listening on {port}"
            )
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout_s} s")


def postgres_bindir() -> Path | None:
    """Directory holding ``initdb`` and ``pg_ctl`` (Debian: /usr/lib/postgresql/<v>/bin)."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent

    def version(path: str) -> float:
        m = re.search(r"(\d+(?:\.\d+)?)/bin/initdb$", path)
        return float(m.group(1)) if m else 0.0

    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb") + glob.glob("/usr/pgsql-*/bin/initdb"),
        key=version,
    )
    return Path(candidates[-1]).parent if candidates else None


class TempPostgres:
    """A PostgreSQL server for tests: a private cluster, or ``$GPUPLAN_TEST_POSTGRES_URL``.

    Use as a context manager; :attr:`admin_url` connects as a role that may create databases.
    As root, the cluster runs as the ``postgres`` user (``runuser``), since PostgreSQL refuses
    to run as root.
    """

    def __init__(self, *, fsync: bool = True) -> None:
        self.fsync = fsync
        self.admin_url: str | None = None
        self._dir: Path | None = None
        self._bindir: Path | None = None
        self._prefix: list[str] = []
        self.port: int | None = None

    def __enter__(self) -> TempPostgres:
        external = os.environ.get(POSTGRES_URL_ENV)
        if external:
            self.admin_url = external
            return self
        self._bindir = postgres_bindir()
        if self._bindir is None:
            raise EnvironmentProblem(
                "no PostgreSQL server binaries (initdb, pg_ctl)",
                hint=f"install them (apt-get install postgresql) or set {POSTGRES_URL_ENV}",
            )
        self._dir = Path(tempfile.mkdtemp(prefix="gpuplan-pg-"))
        if os.geteuid() == 0:
            shutil.chown(self._dir, user="postgres", group="postgres")
            self._prefix = ["runuser", "-u", "postgres", "--"]
        data = self._dir / "data"
        self.port = free_port()
        self._run(
            [
                str(self._bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        )
        opts = f"-p {self.port} -k {self._dir} -c listen_addresses=127.0.0.1 -c max_connections=200"
        if not self.fsync:
            opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._run(
            [
                str(self._bindir / "pg_ctl"),
                "-D",
                str(data),
                "-o",
                opts,
                "-l",
                str(self._dir / "log"),
                "-w",
                "-t",
                "60",
                "start",
            ]
        )
        self.admin_url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        return self

    def _run(self, cmd: list[str]) -> None:
        proc = subprocess.run([*self._prefix, *cmd], capture_output=True, text=True, cwd=self._dir)
        if proc.returncode != 0:
            raise EnvironmentProblem(f"{Path(cmd[0]).name} failed: {proc.stderr.strip()[-500:]}")

    def new_database(self, prefix: str = "gpuplan_test") -> str:
        """Create an empty database; returns its ``postgresql://`` URL."""
        import psycopg
        from sqlalchemy.engine import make_url

        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        admin = make_url(self.admin_url)
        with psycopg.connect(self._psycopg_dsn(admin), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return admin.set(database=name).render_as_string(hide_password=False)

    def drop_database(self, url: str) -> None:
        import psycopg
        from sqlalchemy.engine import make_url

        name = make_url(url).database
        with psycopg.connect(self._psycopg_dsn(make_url(self.admin_url)), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    @staticmethod
    def _psycopg_dsn(url) -> str:
        return url.set(drivername="postgresql").render_as_string(hide_password=False)

    def __exit__(self, *exc: object) -> None:
        if self._dir is None:
            return
        with contextlib.suppress(Exception):
            self._run(
                [
                    str(self._bindir / "pg_ctl"),
                    "-D",
                    str(self._dir / "data"),
                    "-m",
                    "immediate",
                    "-w",
                    "stop",
                ]
            )
        shutil.rmtree(self._dir, ignore_errors=True)


class LiveServer:
    """``gpuplan serve`` in a subprocess on loopback; killable and restartable.

    Parameters
    ----------
    database_url:
        the database the server uses (kept across restarts).
    args:
        extra ``gpuplan serve`` options (``--recalibrate off`` ...).
    log_path:
        where the server's stdout+stderr go (appended across restarts).
    """

    def __init__(
        self,
        database_url: str,
        *,
        args: list[str] | None = None,
        log_path: Path | str | None = None,
        env: dict | None = None,
    ) -> None:
        self.database_url = database_url
        self.args = list(args or [])
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log_path = (
            Path(log_path)
            if log_path
            else Path(tempfile.mkstemp(prefix="gpuplan-serve-", suffix=".log")[1])
        )
        self.env = env or {}

    def start(self, timeout_s: float = 60.0) -> LiveServer:
        cmd = [
            sys.executable,
            "-m",
            "gpuplan",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--database-url",
            self.database_url,
            *self.args,
        ]
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **self.env}
        )
        log.close()
        wait_for_port("127.0.0.1", self.port, timeout_s, self.proc)
        return self

    def kill(self) -> None:
        """SIGKILL: no shutdown handler runs, like a crash or an OOM kill."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class TcpProxy:
    """A loopback TCP proxy that can slow the client-to-server direction down and cut links.

    Used to make an upload last long enough to kill the server in the middle of it, and to
    make a database unreachable on demand.

    Parameters
    ----------
    target_port:
        port on 127.0.0.1 to forward to.
    rate_bytes_per_s:
        ceiling of the client-to-server direction (None: as fast as possible).
    """

    def __init__(self, target_port: int, *, rate_bytes_per_s: float | None = None) -> None:
        import threading

        self.target_port = target_port
        self.rate_bytes_per_s = rate_bytes_per_s
        self.enabled = True
        self.bytes_up = 0  # client -> server bytes forwarded so far
        self.connections = 0
        self._lock = threading.Lock()
        self._socks: set[socket.socket] = set()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        self._closed = False
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        import threading

        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self.enabled:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self.connections += 1
                self._socks.update({client, upstream})
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        try:
            while True:
                rate = self.rate_bytes_per_s if up else None
                data = src.recv(4096 if rate else 65536)
                if not data:
                    break
                if rate:
                    time.sleep(len(data) / rate)
                dst.sendall(data)
                if up:
                    with self._lock:
                        self.bytes_up += len(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()
            with self._lock:
                self._socks.discard(src)
                self._socks.discard(dst)

    def cut(self) -> None:
        """Close every open connection (both ends see a reset/EOF)."""
        with self._lock:
            socks = list(self._socks)
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()

    def close(self) -> None:
        self._closed = True
        self.cut()
        with contextlib.suppress(OSError):
            self._listener.close()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
