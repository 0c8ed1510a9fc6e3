"""uvicorn's httptools protocol, with each response's header and body leaving in one send().

uvicorn writes the status line and headers when the app sends `http.response.start`, and the
body with `http.response.body`: two send() syscalls per answer. On loopback each send runs
the receiver's TCP path too, and for a cached answer those two syscalls were a third of the
worker's CPU. Here the transport holds a write back until the next one (then both go out as
one writev) or until the event loop comes round again (call_soon), whichever is first. So
nothing waits longer than one loop iteration, the bytes and their order are unchanged, and
a close() flushes what is held first.

`cubinforge serve` uses it when httptools is installed (uvicorn's own choice otherwise).
"""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class _HeldTransport:
    """The connection's transport, holding back one write (see the module docstring)."""

    __slots__ = ("_t", "_held", "_loop")

    def __init__(self, transport, loop):
        self._t, self._held, self._loop = transport, None, loop

    def write(self, data) -> None:
        if self._held is None:
            if not data:
                return
            self._held = data
            self._loop.call_soon(self.flush)
        else:
            held, self._held = self._held, None
            self._t.writelines((held, data))

    def writelines(self, chunks) -> None:
        self.flush()
        self._t.writelines(chunks)

    def flush(self) -> None:
        held, self._held = self._held, None
        if held is not None and not self._t.is_closing():
            self._t.write(held)

    def close(self) -> None:
        self.flush()
        self._t.close()

    def __getattr__(self, name):  # is_closing, get_extra_info, pause_reading, abort, ...
        return getattr(self._t, name)


class HeldHttpToolsProtocol(HttpToolsProtocol):
    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = _HeldTransport(transport, self.loop)
