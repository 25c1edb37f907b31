"""Harness of the browser tests: the real ASGI server, the task worker, moto and Chromium.

One session-wide Srifty, started the way ``./run`` starts it: a private data folder (file SQLite,
secret key, run files) with the catalog imported and two users, ``daphne`` serving
``srifty_web.asgi`` (HTTP and websockets) and ``manage.py db_worker`` beside it
(``tests/browser/_worker.py``: the same, with moto's missing placement-group calls stubbed), EC2
on a moto server of this process. The channel layer is Redis when ``SRIFTY_TEST_REDIS_URL`` is set
(``./test`` starts one), else the embedded in-process layer.

The database belongs to the server: tests never use pytest-django's ``db``; they read state
through the REST API (``server.api``) or the pages. Playwright is imported only inside fixtures,
so ``pytest -m "not browser"`` never loads its sync API. Screenshots go to
``$SRIFTY_SCREENSHOT_DIR`` (default: a temporary folder, printed at the end of the run).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from profiler.agent.comm import free_port

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
STAFF = ("root", "root-browser-" + secrets.token_hex(6))
USER = ("alice", "alice-browser-" + secrets.token_hex(6))

# Records every websocket message a page receives in sessionStorage (it survives the reloads the
# pages do themselves), so a test can tell live updates from the snapshot sent on connect.
WS_RECORDER = """
(() => {
  const Native = window.WebSocket;
  function Recording(...args) {
    const ws = new Native(...args);
    ws.addEventListener("message", (ev) => {
      try {
        const data = JSON.parse(ev.data);
        const log = JSON.parse(sessionStorage.getItem("srifty-ws") || "[]");
        // a frame is one message or an array of them (coalesced: srifty_web/live.py)
        for (const m of Array.isArray(data) ? data : [data]) {
          log.push({t: Date.now(), path: new URL(ws.url).pathname, type: m.type, status: m.status,
                    time_ms: m.time_ms, iteration: m.iteration, rank: m.rank});
        }
        sessionStorage.setItem("srifty-ws", JSON.stringify(log));
      } catch (e) { /* not JSON: not ours */ }
    });
    return ws;
  }
  Recording.prototype = Native.prototype;
  Object.assign(Recording, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
  window.WebSocket = Recording;
})();
"""

_current: dict = {}  # the running server, for failure reports


def _tail(path: Path, lines: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class Server:
    url: str
    moto_url: str
    data_dir: Path
    env: dict
    tokens: dict
    logs: dict = field(default_factory=dict)
    procs: list = field(default_factory=list)
    channel_layer: str = "in-memory"

    def manage(self, *args: str) -> str:
        """``manage.py`` against this server's database (its stdout)."""
        return _manage(self.env, *args)

    def api(self, method: str, path: str, who: str = "staff", expect: int | tuple = (200, 201), **kwargs):
        """A REST call with the user's DRF token; returns the JSON body."""
        import requests

        resp = requests.request(
            method,
            self.url + path,
            timeout=30,
            headers={"Authorization": f"Token {self.tokens[who]}"},
            **kwargs,
        )
        wanted = expect if isinstance(expect, tuple) else (expect,)
        assert resp.status_code in wanted, f"{method} {path}: {resp.status_code} {resp.text[:2000]}"
        return resp.json() if resp.content else None

    def ec2(self, region: str = "us-east-1"):
        import boto3

        return boto3.client(
            "ec2",
            region_name=region,
            endpoint_url=self.moto_url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            aws_session_token="testing",
        )

    def log_tails(self, lines: int = 60) -> str:
        return "\n".join(
            f"----- {name} ({path}) -----\n{_tail(path, lines)}" for name, path in self.logs.items()
        )

    def check_alive(self) -> None:
        for name, proc in self.procs:
            assert proc.poll() is None, f"{name} exited with {proc.returncode}\n{self.log_tails()}"


def _manage(env: dict, *args: str, timeout: float = 300) -> str:
    out = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.returncode == 0, f"manage.py {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


USERS_SCRIPT = """
import json, os
from django.contrib.auth import get_user_model
from accounts.tokens import issue_api_token
User = get_user_model()
staff = User.objects.create_superuser(os.environ["B_STAFF"], "", os.environ["B_STAFF_PW"])
user = User.objects.create_user(os.environ["B_USER"], password=os.environ["B_USER_PW"])
print("TOKENS=" + json.dumps({"staff": issue_api_token(staff).key, "user": issue_api_token(user).key}))
"""


def _stop(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
    except ProcessLookupError:
        pass


def _wait_http(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = 60) -> None:
    import requests

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"server exited with {proc.returncode}:\n{_tail(log)}"
        try:
            if requests.get(url, timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} not up after {timeout_s}s:\n{_tail(log)}")


@pytest.fixture(scope="session")
def server(tmp_path_factory, moto_server):
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is not installed (./test installs Debian's chromium with apt-get as root)")
    data = tmp_path_factory.mktemp("srifty-browser-data")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "REDIS_URL", "TASKS_BACKEND", "AWS_PROFILE", "SECRET_KEY"}
    }
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "srifty_web.settings",
            "SRIFTY_DATA_DIR": str(data),
            "SITE_URL": url,
            "AWS_ENDPOINT_URL": moto_server,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "DEBUG": "0",
            "PYTHONUNBUFFERED": "1",
            "LOG_LEVEL": "INFO",
            # the worker watches jobs every 5 s, not 30: the node-lost test waits for one watch
            "JOB_WATCH_EVERY_S": "5",
            "SRIFTY_LOCAL_CODE": "1",  # single-user mode, as ./run starts it: local agents may run model code
        }
    )
    layer = "in-memory"
    if os.environ.get("SRIFTY_TEST_REDIS_URL"):
        env["REDIS_URL"] = os.environ["SRIFTY_TEST_REDIS_URL"]
        # one server per pytest-xdist worker, all on one Redis: each its own channels
        env["CHANNEL_LAYER_PREFIX"] = f"srifty-browser-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
        layer = f"redis ({env['REDIS_URL']})"
    _manage(env, "migrate", "--noinput", "-v0")
    _manage(env, "import_catalog")
    out = _manage(
        {**env, "B_STAFF": STAFF[0], "B_STAFF_PW": STAFF[1], "B_USER": USER[0], "B_USER_PW": USER[1]},
        "shell",
        "-c",
        USERS_SCRIPT,
    )
    tokens = json.loads(
        next(line for line in out.splitlines() if line.startswith("TOKENS="))[len("TOKENS=") :]
    )

    srv = Server(url=url, moto_url=moto_server, data_dir=data, env=env, tokens=tokens, channel_layer=layer)
    commands = {
        "daphne": [
            sys.executable,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "srifty_web.asgi:application",
        ],
        "db_worker": [sys.executable, str(HERE / "_worker.py"), "--interval", "0.2", "--no-startup-delay"],
    }
    try:
        for name, cmd in commands.items():
            log = data / f"{name}.log"
            srv.logs[name] = log
            with open(log, "ab") as fh:
                proc = subprocess.Popen(
                    cmd,
                    cwd=ROOT,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            srv.procs.append((name, proc))
        _wait_http(f"{url}/accounts/login/", srv.procs[0][1], srv.logs["daphne"])
        srv.check_alive()
        _current["server"] = srv
        yield srv
    finally:
        _current.pop("server", None)
        for _, proc in reversed(srv.procs):
            _stop(proc)


@pytest.fixture(scope="session")
def screenshot_dir() -> Path:
    path = Path(os.environ.get("SRIFTY_SCREENSHOT_DIR") or tempfile.mkdtemp(prefix="srifty-screenshots-"))
    path.mkdir(parents=True, exist_ok=True)
    _current["screenshots"] = path
    return path


@pytest.fixture(scope="session")
def browser(server):
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    try:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=60_000)
        yield chromium
        chromium.close()
    finally:
        pw.stop()


class Tab:
    """A fresh browser context and page for one test, with its JS errors and screenshots."""

    def __init__(self, browser, server: Server, shots: Path, name: str):
        self.server = server
        self.context = browser.new_context(base_url=server.url, viewport={"width": 1366, "height": 900})
        self.context.add_init_script(WS_RECORDER)
        self.page = self.context.new_page()
        self.page.set_default_timeout(30_000)
        self.page.set_default_navigation_timeout(60_000)
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        self.page.on("console", self._console)
        self._shots, self._name, self._n = shots, name, 0

    def _console(self, msg) -> None:
        if msg.type == "error" and "favicon" not in (msg.location or {}).get("url", ""):
            self.errors.append(f"console: {msg.text} ({(msg.location or {}).get('url', '')})")

    def login(self, who: tuple[str, str] = STAFF, path: str = "/") -> None:
        self.page.goto(path)
        self.page.fill("#id_username", who[0])
        self.page.fill("#id_password", who[1])
        with self.page.expect_navigation():
            self.page.click("form button[type=submit]:has-text('Log in')")
        assert "/accounts/login/" not in self.page.url, f"login as {who[0]} failed"

    def shot(self, label: str = "") -> Path:
        self._n += 1
        path = self._shots / f"{self._name}{'-' + label if label else ''}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def ws_log(self) -> list[dict]:
        return self.page.evaluate("() => JSON.parse(sessionStorage.getItem('srifty-ws') || '[]')")

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def tab(browser, server, screenshot_dir, request):
    t = Tab(browser, server, screenshot_dir, request.node.name)
    yield t
    t.close()


@pytest.fixture
def staff_tab(tab):
    tab.login(STAFF)
    return tab


@pytest.fixture(scope="session")
def accounts() -> dict:
    """(username, password) of the staff superuser and of the plain user the server has."""
    return {"staff": STAFF, "user": USER}


@pytest.fixture(scope="session")
def shared() -> dict:
    """What one test made that a later one builds on (a plan, a job); each test can also make it
    itself when run alone."""
    return {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    srv = _current.get("server")
    if rep.when == "call" and rep.failed and srv is not None and "browser" in item.keywords:
        rep.sections.append(("srifty server logs", srv.log_tails()))


def pytest_terminal_summary(terminalreporter):
    path = _current.get("screenshots")
    if path is not None:
        terminalreporter.write_sep("-", f"browser screenshots: {path}")
