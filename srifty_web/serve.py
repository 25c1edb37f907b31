"""Serve Srifty with one or more daphne worker processes on one listening socket.

    python -m srifty_web.serve [--host 127.0.0.1] [--port 8000] [--workers N]

One daphne process uses at most one core whatever the load (its event loop and the threads
that run Django's sync views share one interpreter lock). This supervisor starts ``--workers``
daphne processes that each adopt a listening socket it bound (``daphne --fd``). Where the OS has
``SO_REUSEPORT`` (Linux), each worker gets its own socket on the same port and the kernel spreads
new connections over them evenly by hash. With one shared socket, whichever worker wakes first
takes the connection: measured with 50 keep-alive clients on 2 workers, that pinned most
connections to one worker (p50 179 ms against a 131 ms mean). A worker's socket stays open in the
supervisor while the worker restarts, so connections the kernel queued there wait, not fail.
A worker that dies is started again (after 1 s, doubling up to 30 s while it keeps dying
within a minute); SIGTERM/SIGINT stop all of them (SIGKILL after ``--grace`` seconds).

Several workers need ``REDIS_URL``: the in-process channel layer does not cross processes, so a
websocket viewer held by one worker would miss the events another worker received. Without it
the default is one worker; with it, ``WEB_CONCURRENCY`` or the number of CPUs (at most 8).

No Django import here: the supervisor stays small and the workers load the application.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

from srifty_web.env import EnvError, env_int, env_str

APPLICATION = "srifty_web.asgi:application"
MAX_AUTO_WORKERS = 8
RESTART_BACKOFF_S = (1.0, 30.0)  # first delay, cap; reset after a worker has lived a minute
STABLE_S = 60.0


def default_workers(redis_url: str) -> int:
    try:
        configured = env_int("WEB_CONCURRENCY", 0)
    except EnvError as exc:
        raise SystemExit(f"serve: {exc}") from None
    if configured > 0:
        return configured
    return min(os.cpu_count() or 1, MAX_AUTO_WORKERS) if redis_url else 1


def check_workers(workers: int, redis_url: str) -> str | None:
    """Why this worker count cannot run, or None."""
    if workers < 1:
        return f"--workers must be at least 1, not {workers}"
    if workers > 1 and not redis_url:
        return (
            f"--workers {workers} needs REDIS_URL: the in-process channel layer does not cross "
            "processes, so websocket viewers on one worker would miss events posted to another"
        )
    return None


def listen(host: str, port: int, backlog: int = 2048, *, reuse_port: bool = False) -> socket.socket:
    """A listening socket a worker adopts (inheritable, so it survives exec)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=backlog, reuse_port=reuse_port)
    sock.set_inheritable(True)
    return sock


def listen_all(host: str, port: int, workers: int) -> list[socket.socket]:
    """One socket per worker on one port (``SO_REUSEPORT``), or one shared socket without it."""
    if workers == 1 or not hasattr(socket, "SO_REUSEPORT"):
        return [listen(host, port)]
    first = listen(host, port, reuse_port=True)
    socks = [first]
    try:
        port = first.getsockname()[1]  # port 0 picked one: the others join that one
        socks += [listen(host, port, reuse_port=True) for _ in range(workers - 1)]
    except OSError:
        for s in socks:
            s.close()
        raise
    return socks


def worker_command(fd: int, args: argparse.Namespace, python: str = sys.executable) -> list[str]:
    cmd = [python, "-m", "daphne", "--fd", str(fd)]
    if args.proxy_headers:
        cmd.append("--proxy-headers")
    if args.access_log:
        cmd += ["--access-log", args.access_log]
    else:
        cmd += ["-v", "0"]  # verbosity 1 writes an access-log line per request to stdout
    return [*cmd, APPLICATION]


@dataclass
class Worker:
    index: int
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    delay_s: float = RESTART_BACKOFF_S[0]
    restart_at: float = 0.0


@dataclass
class Supervisor:
    socks: list[socket.socket]  # one per worker, or one that all share
    args: argparse.Namespace
    workers: list[Worker] = field(default_factory=list)
    stopping: bool = False

    def start_worker(self, w: Worker) -> None:
        fd = self.socks[w.index % len(self.socks)].fileno()
        w.proc = subprocess.Popen(worker_command(fd, self.args), pass_fds=(fd,), stdin=subprocess.DEVNULL)
        w.started_at = time.monotonic()
        log(f"worker {w.index} started (pid {w.proc.pid})")

    def reap(self, now: float) -> None:
        """Notice dead workers and schedule their restart with backoff."""
        for w in self.workers:
            if w.proc is None or w.proc.poll() is None:
                continue
            lived = now - w.started_at
            w.delay_s = RESTART_BACKOFF_S[0] if lived > STABLE_S else min(w.delay_s * 2, RESTART_BACKOFF_S[1])
            w.restart_at = now + w.delay_s
            log(
                f"worker {w.index} (pid {w.proc.pid}) exited with {w.proc.returncode} after {lived:.0f} s; "
                f"restarting in {w.delay_s:.0f} s"
            )
            w.proc = None

    def restart_due(self, now: float) -> None:
        for w in self.workers:
            if w.proc is None and now >= w.restart_at and not self.stopping:
                self.start_worker(w)

    def run(self) -> int:
        self.workers = [Worker(i) for i in range(self.args.workers)]
        for w in self.workers:
            self.start_worker(w)
        while not self.stopping:
            now = time.monotonic()
            self.reap(now)
            self.restart_due(now)
            time.sleep(0.2)
        return self.stop()

    def stop(self) -> int:
        live = [w.proc for w in self.workers if w.proc is not None and w.proc.poll() is None]
        for p in live:
            p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.args.grace
        for p in live:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for s in self.socks:
            s.close()
        log("stopped")
        return 0


def log(message: str) -> None:
    print(f"[serve] {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    redis_url = env_str("REDIS_URL")
    ap = argparse.ArgumentParser(prog="python -m srifty_web.serve", description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0 picks a free one)")
    ap.add_argument(
        "--workers",
        type=int,
        default=None,
        help="daphne processes (default: WEB_CONCURRENCY, else CPUs with REDIS_URL, else 1)",
    )
    ap.add_argument("--access-log", default="", help="access log path, '-' for stdout (default: none)")
    ap.add_argument(
        "--proxy-headers",
        action="store_true",
        # daphne then takes the LEFTMOST X-Forwarded-For entry, which any client can write:
        # the login lockout counts addresses from TRUSTED_PROXY_COUNT instead (see README).
        help="let daphne set the client address from X-Forwarded-For (client-written; prefer TRUSTED_PROXY_COUNT)",
    )
    ap.add_argument("--grace", type=float, default=10.0, help="seconds a worker gets to stop (default 10)")
    args = ap.parse_args(argv)
    if args.workers is None:
        args.workers = default_workers(redis_url)
    problem = check_workers(args.workers, redis_url)
    if problem:
        ap.error(problem)
    return args


def site_url_for(host: str, port: int) -> str:
    """The URL a process on this machine reaches the server at (wildcard binds → loopback)."""
    if host in ("0.0.0.0", "", "::"):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        socks = listen_all(args.host, args.port, args.workers)
    except OSError as exc:
        print(f"serve: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    host, port = socks[0].getsockname()[:2]
    # The workers' SITE_URL (where agents post back) follows the port really bound, unless the
    # operator set one (a public https address behind a proxy).
    os.environ.setdefault("SITE_URL", site_url_for(host, port))
    sup = Supervisor(socks, args)

    def on_signal(signum, frame) -> None:
        sup.stopping = True

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    log(f"listening on http://{host}:{port}/ with {args.workers} worker(s)")
    return sup.run()


if __name__ == "__main__":
    raise SystemExit(main())
