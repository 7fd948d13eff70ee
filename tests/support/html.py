"""The status page read back as a person sees it: its tables as rows of cell texts, and the
elements of a kind with their attributes."""

from __future__ import annotations

from html.parser import HTMLParser


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[list[list[str]]] = []
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self._cell: list[str] | None = None
        self._in_title = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "title":
            self._in_title += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self.tables:
            self.tables[-1][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "title":
            self._in_title -= 1

    def handle_data(self, data: str) -> None:
        if self._cell is not None and not self._in_title:
            self._cell.append(data)


def tables(page: str) -> list[list[list[str]]]:
    """Every table of ``page``: its rows (the header first), each a list of cell texts
    (SVG titles left out)."""
    reader = _Reader()
    reader.feed(page)
    return reader.tables


def table_after(page: str, heading: str) -> list[list[str]]:
    """The first table after the first occurrence of ``heading`` in ``page``."""
    found = page.index(heading)
    return tables(page[found:])[0]


def elements(page: str, tag: str) -> list[dict[str, str | None]]:
    """The attributes of every ``tag`` element of ``page``."""
    reader = _Reader()
    reader.feed(page)
    return [attrs for name, attrs in reader.elements if name == tag]
