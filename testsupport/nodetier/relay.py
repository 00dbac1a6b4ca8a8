"""A TCP relay from a socket of the host's network namespace into the node's.

The host side binds a loopback port and hands the listening socket to the node's PID 1,
which runs in a network namespace of its own: a socket keeps the namespace it was created
in. Each accepted connection is joined to ``127.0.0.1:<port>`` inside the node, so the
apiserver has the same URL (and serving certificate) on the host and in the node.
"""

from __future__ import annotations

import contextlib
import socket
import threading

_CHUNK = 1 << 16


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(_CHUNK):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def _join(client: socket.socket, port: int) -> None:
    try:
        upstream = socket.create_connection(("127.0.0.1", port), timeout=10)
    except OSError:
        client.close()
        return
    upstream.settimeout(None)
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


class Relay:
    """Accept on ``listener`` (any namespace), connect to ``127.0.0.1:port`` (this one)."""

    def __init__(self, listener: socket.socket, port: int) -> None:
        self.listener = listener
        self.port = port
        self._thread = threading.Thread(target=self._serve, name="relay", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed: the node is stopping
                return
            threading.Thread(target=_join, args=(client, self.port), daemon=True).start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
