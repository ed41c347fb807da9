"""Writing ``java.util.Properties`` files, such as a broker's ``server.properties``.

Package-internal: :func:`write_properties` and :func:`escape_property` are its interface.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

__all__ = ["escape_property", "write_properties"]


def escape_property(text: str, *, key: bool) -> str:
    """``text`` escaped so that ``java.util.Properties.load`` reads it back unchanged, as a
    key (``key=True``: separators and comment marks escaped too) or as a value."""
    out: list[str] = []
    for index, char in enumerate(text):
        if char == "\\":
            out.append("\\\\")
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\t":
            out.append("\\t")
        elif (key and char in " =:#!") or (char == " " and index == 0):
            out.append("\\" + char)
        elif ord(char) > 0x7E or ord(char) < 0x20:
            # java.util.Properties reads files as ISO-8859-1.
            out.append("".join(f"\\u{unit:04x}" for unit in _utf16_units(char)))
        else:
            out.append(char)
    return "".join(out)


def _utf16_units(char: str) -> list[int]:
    data = char.encode("utf-16-be")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


def write_properties(path: Path, values: Mapping[str, str]) -> None:
    """Write ``values`` to ``path`` as a properties file, one ``key=value`` line each."""
    lines = [
        f"{escape_property(k, key=True)}={escape_property(v, key=False)}" for k, v in values.items()
    ]
    path.write_text("\n".join(lines) + "\n", encoding="ascii")
