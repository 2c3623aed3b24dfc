"""A local HTTP file server for download tests: Range requests, a transfer cut mid-way, a slow mode."""

from __future__ import annotations

import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FileServer:
    """Serves ``files`` (URL path -> bytes) on 127.0.0.1.

    ``cut[path] = n``: the next full or ranged response for ``path`` announces the whole
    length but stops after ``n`` bytes and closes the connection (once). ``delay``: seconds
    to sleep per 64 kB sent. ``requests``: (path, Range header or None) of every GET.
    """

    def __init__(self, files: dict[str, bytes] | None = None) -> None:
        self.files: dict[str, bytes] = dict(files or {})
        self.cut: dict[str, int] = {}
        self.delay = 0.0
        self.requests: list[tuple[str, str | None]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                server.requests.append((path, self.headers.get("Range")))
                data = server.files.get(path)
                if data is None:
                    self.send_error(404)
                    return
                start = 0
                match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
                if match:
                    start = int(match.group(1))
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                body = data[start:]
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()
                limit = server.cut.pop(path, None)
                if limit is not None:
                    body = body[:limit]
                for i in range(0, len(body), 65536):
                    self.wfile.write(body[i:i + 65536])
                    if server.delay:
                        time.sleep(server.delay)
                if limit is not None:
                    self.wfile.flush()
                    self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "FileServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def gets(self, path: str) -> list[str | None]:
        """The Range headers of the GETs of ``path`` so far."""
        return [r for p, r in self.requests if p == path]
