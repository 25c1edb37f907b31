"""ASGI entry point: HTTP through Django (static files included), websockets through channels.

HTTP requests run through Django's *WSGI* handler, one thread hop per request (asgiref's
``WsgiToAsgi``). Django's ASGI handler runs every sync middleware (all of ours and Django's
are ``MiddlewareMixin``) in its own ``sync_to_async`` hop, twice per request: about 15 hops
and 4-6 ms of CPU per request here, more than most of our views cost. Our views are all sync,
so nothing is lost; websockets keep the async consumers.

The hop goes to the event loop's thread pool (``thread_sensitive=False``), not to asgiref's
one "thread-sensitive" thread: outside a ``ThreadSensitiveContext`` concurrent requests would
share (and break) one ``CurrentThreadExecutor``. Each pool thread keeps its own database
connection, as under a threaded WSGI server.

The pool is small (``WEB_THREADS``, default 2 per worker process) and our own, not the loop's
default (CPUs + 4 threads): requests are CPU-bound Python, so more threads only contend for the
GIL. Measured with bench/load.py (2 cores, 2 workers, 50 closed-loop API clients): 1 thread
~485 req/s, 2 ~455, 4-6 ~390-445, with p99 rising alongside. 2 rather than 1 so that one slow
request (a large page, a slow query) does not stall every other request on its worker; plans are
solved by the task worker, never in a request.
"""

import os
from concurrent.futures import ThreadPoolExecutor

from django.core.wsgi import get_wsgi_application

from srifty_web.env import EnvError, env_int

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "srifty_web.settings")
django_wsgi_app = get_wsgi_application()

from asgiref.sync import sync_to_async  # noqa: E402
from asgiref.wsgi import WsgiToAsgi, WsgiToAsgiInstance  # noqa: E402
from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs the app registry)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.contrib.staticfiles.handlers import StaticFilesHandler  # noqa: E402

from planner.app.serializers import warm_model_registries  # noqa: E402
from srifty_web.routing import websocket_urlpatterns  # noqa: E402
from srifty_web.security import SameOriginWebsocketValidator  # noqa: E402

# Before serving: the first plan request would otherwise load torch to check its model's name,
# seconds during which every other request of this process waits (see warm_model_registries).
warm_model_registries()

HTTP_THREADS = env_int("WEB_THREADS", 2)
if not 1 <= HTTP_THREADS <= 64:
    raise EnvError(f"WEB_THREADS={HTTP_THREADS} must be between 1 and 64")
_http_pool = ThreadPoolExecutor(max_workers=HTTP_THREADS, thread_name_prefix="http")


class _PooledInstance(WsgiToAsgiInstance):
    run_wsgi_app = sync_to_async(
        WsgiToAsgiInstance.__dict__["run_wsgi_app"].func, thread_sensitive=False, executor=_http_pool
    )


class PooledWsgiToAsgi(WsgiToAsgi):
    """``WsgiToAsgi`` whose WSGI calls run on the loop's thread pool (see the module docstring)."""

    async def __call__(self, scope, receive, send):
        await _PooledInstance(self.wsgi_application, self.duplicate_header_limit)(scope, receive, send)


application = ProtocolTypeRouter(
    {
        # daphne serves static files itself so that ./run needs no separate web server.
        "http": PooledWsgiToAsgi(StaticFilesHandler(django_wsgi_app)),
        # Origin: scheme, host and port must match ours (srifty_web.security).
        "websocket": SameOriginWebsocketValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
