"""A real browser for the console's tests: Debian's Chromium driven by Playwright for Python,
and a real uvicorn server on loopback in a thread of the test process.

Playwright's own browser download cannot be reached here, so it is pointed at
``/usr/bin/chromium``, which ``scripts/bootstrap.sh`` installs when it is missing.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

CHROMIUM = os.environ.get("TFBATCH_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@contextmanager
def chromium() -> Iterator[object]:
    """A launched headless Chromium (a Playwright Browser); closed on exit."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"no Chromium at {CHROMIUM}: run scripts/bootstrap.sh (it installs Debian's chromium) "
                    "or set TFBATCH_CHROMIUM")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def serving(app) -> Iterator[str]:
    """``app`` on a real uvicorn server on 127.0.0.1 (a free port); yields its base URL."""
    import socket

    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="console-server")
    thread.start()
    try:
        ready = threading.Event()
        # uvicorn sets .started once its socket accepts; its own loop is the only one to ask.
        for _ in range(600):
            if server.started or not thread.is_alive():
                break
            ready.wait(0.05)
        assert server.started, "the console's uvicorn server did not start"
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
