"""Server-sent events read back from a stream that is passed through byte for byte.

The proxy relays the upstream's bytes as they arrive, one whole event at a time (`EventReader.whole`): a
stream that breaks then never leaves half an event before the error event that ends it (the SDKs would
read the two as one, and fail on its JSON). The events read go to the dialect's reassembler, so the reply
can be recorded once the stream ends.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Event:
    """One event: its name (``message`` when the stream names none) and its data lines joined."""

    name: str
    data: str


class EventReader:
    """Feed it bytes in any pieces; it returns each event once its blank line has arrived."""

    def __init__(self) -> None:
        self._buffer = b""  # bytes not yet split into lines
        self._event = bytearray()  # the lines of the event being read, as they came
        self._whole = bytearray()  # the events completed since `whole` was last called, as they came
        self._name = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[Event]:
        """The events `chunk` completes, in order."""
        self._buffer += chunk
        events: list[Event] = []
        while True:
            end = self._buffer.find(b"\n")
            if end < 0:
                return events
            line = self._buffer[:end].rstrip(b"\r").decode("utf-8", errors="replace")
            self._event += self._buffer[: end + 1]
            self._buffer = self._buffer[end + 1 :]
            if not line:
                if self._data:
                    events.append(Event(self._name or "message", "\n".join(self._data)))
                self._name, self._data = "", []
                self._whole += self._event
                self._event.clear()
            elif line.startswith(":"):
                continue  # a comment (keep-alive)
            else:
                field, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if field == "event":
                    self._name = value
                elif field == "data":
                    self._data.append(value)

    def whole(self) -> bytes:
        """The bytes of the events completed since the last call, exactly as fed (each up to its blank line)."""
        out = bytes(self._whole)
        self._whole.clear()
        return out

    def partial(self) -> bytes:
        """The bytes fed after the last whole event: an event not yet ended by its blank line."""
        return bytes(self._event) + self._buffer
