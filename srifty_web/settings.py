"""Srifty settings: one module, configured from the environment, safe defaults.

Embedded defaults (nothing set): SQLite under ``var/``, the in-process channel layer, the
database task backend and local profiling. ``DATABASE_URL`` switches to PostgreSQL (or any
dj-database-url URL), ``REDIS_URL`` switches the channel layer to Redis.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

import dj_database_url

from srifty_web.env import env_bool, env_float, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(env_str("SRIFTY_DATA_DIR", str(BASE_DIR / "var")))
DATA_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("DEBUG", False)


def _env_or_kept(name: str, filename: str, make) -> str:
    """``$name``, else a value made once by ``make()`` and kept in ``DATA_DIR/filename``
    (readable by the owner only), so that it survives restarts of a local install."""
    value = env_str(name)
    if value:
        return value
    path = DATA_DIR / filename
    if not path.exists():
        # Written aside, then linked into place: of two processes starting at once (daphne and
        # the worker), one value wins and neither reads a half-written file.
        tmp = path.with_name(f".{filename}.{os.getpid()}")
        tmp.write_text(make())
        tmp.chmod(0o600)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return path.read_text().strip()


# A generated key keeps sessions valid across restarts without shipping a fixed key in the repo.
SECRET_KEY = _env_or_kept("SECRET_KEY", "secret_key", lambda: secrets.token_urlsafe(50))
# (Django's test runner adds "testserver" itself; an install never needs it.)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# Where agents and job nodes post back. Unset, it is the address ./run and srifty_web.serve
# listen on: PORT (default 8000) on 127.0.0.1 -- ./run exports PORT to the task worker too, so a
# local agent started by the worker posts to the port the server really uses.
PORT = env_int("PORT", 8000)
SITE_URL = env_str("SITE_URL", f"http://127.0.0.1:{PORT}")

# A team's own model code (a ``package.module:factory`` spec) runs only inside the agent: on its
# EC2 VM, or as a local subprocess of this server, which is this machine running whatever a user
# typed. So a local agent takes code specs only when the operator says so: ./run (one demo user
# on 127.0.0.1) turns it on, a shared install leaves it off. The web process and the task worker
# never build code specs at all (workload/specs.py).
LOCAL_CODE_EXECUTION = env_bool("SRIFTY_LOCAL_CODE", False)


# This install's id, tagged on every EC2 instance it starts (``srifty:install-id``) so that its
# reconciler terminates only its own, never those of another install in the same AWS account.
INSTALL_ID = _env_or_kept("SRIFTY_INSTALL_ID", "install_id", lambda: secrets.token_hex(8))

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "django_tasks",
    "django_tasks_db",
    "catalog",
    "profiler",
    "planner.app",
    "launcher",
    "frontend",
    "accounts",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "srifty_web.urls"
WSGI_APPLICATION = None
ASGI_APPLICATION = "srifty_web.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -----------------------------------------------------------------------------
# An empty DATABASE_URL means "not set": the embedded SQLite database.
DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL") or f"sqlite:///{DATA_DIR / 'db.sqlite3'}",
        # Kept open between requests: HTTP runs on the event loop's few long-lived pool threads
        # (srifty_web/asgi.py), so this is one connection per thread, not one per request;
        # reconnecting cost ~2 ms a request. A database server (not SQLite, a file) may drop
        # an idle connection: health checks notice that before a request uses it.
        conn_max_age=env_int("DB_CONN_MAX_AGE", 60),
        conn_health_checks=bool(env_str("DATABASE_URL")),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the web process read while the task worker writes; IMMEDIATE transactions
    # take the write lock up front so two writers queue instead of failing with "locked".
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
        }
    )
    # Tests get a file too, not Django's shared-cache in-memory database: with that, a live test
    # server hands one connection to all its request threads, and two concurrent agent posts
    # interleave savepoints on it. A file gives each thread its own connection, as in production.
    DATABASES["default"]["TEST"] = {
        "NAME": str(Path(tempfile.gettempdir()) / f"srifty-test-{os.getpid()}.sqlite3")
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Channels -----------------------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    # The pub/sub layer keeps one Redis connection per event loop. The core RedisChannelLayer
    # shares one pool across loops, and a send from a second loop in the same process (a
    # worker thread's async_to_sync while the server loop listens) was lost in our end-to-end
    # test; pub/sub also fans out to many viewers with one PUBLISH instead of one push each.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            # Redis pub/sub channels ignore the database number: two Srifty installs on one Redis
            # (or two test servers) need different prefixes, or each hears the other's groups.
            "CONFIG": {"hosts": [REDIS_URL], "prefix": env_str("CHANNEL_LAYER_PREFIX", "asgi")},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# --- Background tasks (django-tasks, database backend) ------------------------------------
TASKS = {
    "default": {
        "BACKEND": env_str("TASKS_BACKEND", "django_tasks_db.DatabaseBackend"),
    }
}

# --- Auth ---------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

# --- Security (tightened automatically when DEBUG is off behind HTTPS) ----------------------
SECURE_HTTPS = env_bool("SECURE_HTTPS", False)
SESSION_COOKIE_SECURE = SECURE_HTTPS
CSRF_COOKIE_SECURE = SECURE_HTTPS
SECURE_SSL_REDIRECT = SECURE_HTTPS
SECURE_HSTS_SECONDS = 31536000 if SECURE_HTTPS else 0
# Behind a proxy that terminates TLS, Django sees plain HTTP: without trusting the proxy's
# X-Forwarded-Proto it would redirect every request to HTTPS forever. Set only behind a proxy
# that overwrites that header.
if env_bool("SECURE_PROXY_SSL", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
# Content-Security-Policy on every response (srifty_web/security.py), right inside Django's
# SecurityMiddleware so that it also covers what the inner middleware answer (CSRF 403s, redirects).
MIDDLEWARE.insert(
    MIDDLEWARE.index("django.middleware.security.SecurityMiddleware") + 1,
    "srifty_web.security.ContentSecurityPolicyMiddleware",
)
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("DATA_UPLOAD_MAX_MEMORY_SIZE", 10 * 1024 * 1024)
DATA_UPLOAD_MAX_NUMBER_FIELDS = 1000  # form fields per request (Django's default, pinned)
DATA_UPLOAD_MAX_NUMBER_FILES = 10  # the largest form takes 2 files (catalog CSV upload)
FILE_UPLOAD_MAX_MEMORY_SIZE = 2_621_440  # larger uploads spool to disk (Django's default, pinned)
CATALOG_UPLOAD_MAX_BYTES = env_int(
    "CATALOG_UPLOAD_MAX_BYTES", 32 * 1024 * 1024
)  # one CSV of the admin import
# A task's local workdir, uploaded as an archive (web Launch dialog, API) or packed by manage.py launch.
JOB_WORKDIR_MAX_MB = env_int("JOB_WORKDIR_MAX_MB", 200)

# --- I18N ---------------------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# --- Static files -------------------------------------------------------------------------
STATIC_URL = "/static/"
STATIC_ROOT = DATA_DIR / "static"


def _plotly_dir() -> Path:
    """plotly.js ships inside the plotly Python package; serve it from there (no CDN)."""
    import plotly

    return Path(plotly.__file__).resolve().parent / "package_data"


STATICFILES_DIRS = [("plotly", _plotly_dir())]

# --- REST framework -----------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first so that an anonymous request gets 401 with WWW-Authenticate, not 403.
        "accounts.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": [
        "srifty_web.payloads.SafeJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_PAGINATION_CLASS": "srifty_web.pagination.BoundedPagination",
    "PAGE_SIZE": 100,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_THROTTLE_RATES": {
        "agent": env_str("AGENT_THROTTLE_RATE", "6000/min"),
        "token": env_str("TOKEN_THROTTLE_RATE", "10/min"),
    },
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Srifty API",
    "DESCRIPTION": (
        "Catalog, profiling, planning and launching of GPU clusters for DDP training. Money is US "
        'dollars as a decimal string everywhere (e.g. "12.345600"; plan results and requests with '
        "four places), never a JSON number (srifty_web/money.py); inputs such as budget_usd accept "
        "either."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # One summary and tag per operation (and the tags' descriptions), node/agent endpoints tagged
    # internal: srifty_web/openapi.py.
    "PREPROCESSING_HOOKS": ["srifty_web.openapi.register_node_token_schemes"],
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",  # drf-spectacular's default, kept
        "srifty_web.openapi.add_summaries_and_tags",
    ],
}

# --- Srifty -------------------------------------------------------------------------------
CATALOG_FIXTURES_DIR = BASE_DIR / "catalog" / "fixtures"
# The benches' validated error per prediction source (planner.validated); absent: "not validated".
VALIDATED_ERRORS_PATH = BASE_DIR / "planner" / "data" / "validated_errors.json"
AWS_DEFAULT_REGION = env_str("AWS_DEFAULT_REGION", "us-east-1")
# Tests point boto3 at a local moto server with this; empty means real AWS endpoints.
AWS_ENDPOINT_URL = env_str("AWS_ENDPOINT_URL")
PROFILER_PROVIDER_DEFAULT = env_str("PROFILER_PROVIDER_DEFAULT", "local")
PROFILER_MAX_RUN_MINUTES = env_int("PROFILER_MAX_RUN_MINUTES", 60)
AGENT_TOKEN_TTL_HOURS = env_float("AGENT_TOKEN_TTL_HOURS", 6.0)
# Search state one plan's solve may hold (MB, counted by planner.solver): a request that cannot
# fit is refused naming max_nodes / max_types and this limit, instead of growing the worker.
PLAN_MAX_MEMORY_MB = env_float("PLAN_MAX_MEMORY_MB", 512.0)
# Each plan's model trace and solve run in a child of the worker (planner.app.solving): the
# memory that child may take of its own (MB: address space beyond the worker's, RLIMIT_AS, and
# private resident pages; 0 = no limit) and its wall time (seconds, model trace included; 0 = no
# limit). A plan past either fails naming the setting.
PLAN_CHILD_MAX_MEMORY_MB = env_float("PLAN_CHILD_MAX_MEMORY_MB", 1024.0)
PLAN_MAX_SOLVE_S = env_float("PLAN_MAX_SOLVE_S", 300.0)
# How often a worker watches each running job (launcher.tasks.watch_job_task, seconds): EC2 state,
# lost nodes, spend against the cap, drift. Each watch makes a few EC2 describe calls per job.
JOB_WATCH_EVERY_S = env_float("JOB_WATCH_EVERY_S", 30.0)
# Sign-ins (srifty_web.login_guard): proxies of ours in front of the server that append to
# X-Forwarded-For (count; 0 = the TCP peer is the client, the header is ignored). DRF's
# throttles read the same number.
TRUSTED_PROXY_COUNT = max(0, env_int("TRUSTED_PROXY_COUNT", 0))
REST_FRAMEWORK["NUM_PROXIES"] = TRUSTED_PROXY_COUNT
# Wrong passwords per username / per client address (count) within LOGIN_LOCKOUT_MINUTES
# before that username / address is refused for LOGIN_LOCKOUT_MINUTES (minutes).
LOGIN_FAILURES_PER_USER = env_int("LOGIN_FAILURES_PER_USER", 5)
LOGIN_FAILURES_PER_ADDRESS = env_int("LOGIN_FAILURES_PER_ADDRESS", 20)
LOGIN_LOCKOUT_MINUTES = env_float("LOGIN_LOCKOUT_MINUTES", 15.0)
# Life of a user's API token from when POST /api/v1/auth/token/ issues it (days).
API_TOKEN_TTL_DAYS = env_float("API_TOKEN_TTL_DAYS", 90.0)
# Login failure counts and DRF throttles live in the default cache: this process's memory with
# one web worker, Redis with REDIS_URL (several workers need it, srifty_web.serve), shared by all.
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
# An uploaded workdir archive is checked and repacked in a child process (launcher.unpack): its
# wall-clock (and CPU) time in seconds and its address space in MB (RLIMIT_AS); past either, a 400.
JOB_WORKDIR_CHECK_TIMEOUT_S = env_int("JOB_WORKDIR_CHECK_TIMEOUT_S", 120)
JOB_WORKDIR_CHECK_MEMORY_MB = env_int("JOB_WORKDIR_CHECK_MEMORY_MB", 512)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
