"""Documents cut into retrievable chunks: by words with overlap, headings kept with their text.

A chunk is what the model sees for one hit, so each must make sense alone:
- plain text is cut into windows of `chunk_size` words, each sharing `chunk_overlap` words with the
  one before, so a sentence cut at a boundary is whole in at least one chunk;
- Markdown is cut per section, and every chunk of a section starts with its heading trail
  ("Store > Opening hours"), so "Sunday 11-3" is never separated from what it is the hours of;
- CSV rows are records, written "column: value; ..." and packed whole into chunks (no overlap: a row
  repeated in two chunks would only crowd the top-k); a row longer than a chunk is cut like text.

Chunks keep the source's own whitespace between the words they span. Everything here is pure and
deterministic: the same file and settings give the same chunks, which is what makes re-ingesting an
unchanged file a no-op.
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

WORD = re.compile(r"\S+")
# ATX headings only ("## Title", optional closing #s); a "#tag" with no space is text.
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
FENCE = re.compile(r"^ {0,3}(```|~~~)")
HEADING_SEPARATOR = " > "

TEXT_SUFFIXES = (".txt", ".text")
MARKDOWN_SUFFIXES = (".md", ".markdown")
CSV_SUFFIXES = (".csv",)
PDF_SUFFIXES = (".pdf",)
SUPPORTED = ", ".join((*TEXT_SUFFIXES, *MARKDOWN_SUFFIXES, *CSV_SUFFIXES, *PDF_SUFFIXES))


class ChunkingError(ValueError):
    """Bad chunking settings."""


class DocumentError(Exception):
    """A file that cannot be ingested: missing, unreadable, of an unsupported type, or without text."""


@dataclass(frozen=True)
class Chunk:
    index: int
    content: str
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def content_hash(self) -> str:
        return content_hash(self.content)


@dataclass(frozen=True)
class Section:
    """A run of text that is chunked on its own, with the heading trail every chunk of it repeats."""

    text: str
    heading: str = ""
    metadata: dict[str, str] = field(default_factory=dict)


def content_hash(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def check_settings(chunk_size: int, chunk_overlap: int) -> None:
    if chunk_size < 1:
        raise ChunkingError(f"the chunk size must be at least 1 word (got {chunk_size})")
    if not 0 <= chunk_overlap < chunk_size:
        raise ChunkingError(
            f"the chunk overlap must be at least 0 and smaller than the chunk size "
            f"(got overlap {chunk_overlap}, size {chunk_size})"
        )


def word_windows(text: str, chunk_size: int, chunk_overlap: int) -> list[str]:
    """`text` cut into windows of `chunk_size` words, each repeating the last `chunk_overlap` words of
    the previous one. The last window ends at the last word; no window is empty."""
    check_settings(chunk_size, chunk_overlap)
    spans = [match.span() for match in WORD.finditer(text)]
    windows: list[str] = []
    start = 0
    while start < len(spans):
        end = min(start + chunk_size, len(spans))
        windows.append(text[spans[start][0] : spans[end - 1][1]])
        if end == len(spans):
            break
        start += chunk_size - chunk_overlap
    return windows


def chunk_sections(sections: list[Section], chunk_size: int, chunk_overlap: int) -> list[Chunk]:
    chunks: list[Chunk] = []
    for section in sections:
        for window in word_windows(section.text, chunk_size, chunk_overlap):
            content = f"{section.heading}\n{window}" if section.heading else window
            metadata = {**section.metadata, **({"heading": section.heading} if section.heading else {})}
            chunks.append(Chunk(len(chunks), content, metadata))
    return chunks


def chunk_records(records: list[str], chunk_size: int, chunk_overlap: int, kind: str = "csv") -> list[Chunk]:
    """Whole records packed into chunks of at most `chunk_size` words; an oversized record is cut alone."""
    check_settings(chunk_size, chunk_overlap)
    chunks: list[Chunk] = []
    batch: list[str] = []
    batch_words = 0
    first_row = 1

    def flush(last_row: int) -> None:
        nonlocal batch, batch_words
        if batch:
            rows = f"{first_row}" if first_row == last_row else f"{first_row}-{last_row}"
            chunks.append(Chunk(len(chunks), "\n".join(batch), {"format": kind, "rows": rows}))
        batch, batch_words = [], 0

    for row, record in enumerate(records, start=1):
        words = len(WORD.findall(record))
        if words > chunk_size:
            flush(row - 1)
            for window in word_windows(record, chunk_size, chunk_overlap):
                chunks.append(Chunk(len(chunks), window, {"format": kind, "rows": str(row)}))
            first_row = row + 1
            continue
        if batch_words + words > chunk_size:
            flush(row - 1)
            first_row = row
        batch.append(record)
        batch_words += words
    flush(len(records))
    return chunks


def markdown_sections(text: str) -> list[Section]:
    """One section per heading, carrying the trail of headings above it; headings in code fences are text."""
    text = _without_front_matter(text)
    sections: list[Section] = []
    trail: list[tuple[int, str]] = []
    body: list[str] = []
    in_fence = False

    def close_section() -> None:
        content = "\n".join(body).strip()
        if content:
            heading = HEADING_SEPARATOR.join(title for _, title in trail)
            sections.append(Section(content, heading, {"format": "markdown"}))
        body.clear()

    for line in text.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
        match = None if in_fence else HEADING.match(line)
        if match is None:
            body.append(line)
            continue
        close_section()
        level, title = len(match.group(1)), match.group(2).strip()
        trail = [(lvl, t) for lvl, t in trail if lvl < level]
        if title:
            trail.append((level, title))
    close_section()
    return sections


def _without_front_matter(text: str) -> str:
    if text.startswith("---\n"):
        end = text.find("\n---", 4)
        if end != -1:
            newline = text.find("\n", end + 4)
            return text[newline + 1 :] if newline != -1 else ""
    return text


def csv_records(text: str) -> list[str]:
    """Each data row as "column: value; ..." (empty cells left out); the first row names the columns."""
    first_line = text.split("\n", 1)[0]
    delimiter = ","
    if "," not in first_line:
        delimiter = "\t" if "\t" in first_line else ";" if ";" in first_line else ","
    rows = list(csv.reader(io.StringIO(text), delimiter=delimiter))
    if not rows:
        return []
    header = [name.strip() for name in rows[0]]
    records = []
    for row in rows[1:]:
        pairs = []
        for position, cell in enumerate(row):
            value = " ".join(cell.split())
            if value:
                name = header[position] if position < len(header) and header[position] else f"column {position + 1}"
                pairs.append(f"{name}: {value}")
        if pairs:
            records.append("; ".join(pairs))
    return records


def read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DocumentError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DocumentError(f"{path}: is a directory; give the files inside it") from None
    except OSError as exc:
        raise DocumentError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DocumentError(f"{path}: not UTF-8 text; convert it to UTF-8 first") from None


def pdf_sections(path: Path) -> list[Section]:
    try:
        from pypdf import PdfReader
    except ImportError:
        raise DocumentError(
            f"{path}: skipped, reading PDF needs the pypdf package (pip install pypdf), "
            "or convert the file to text first"
        ) from None
    try:
        reader = PdfReader(str(path))
        pages = [page.extract_text() or "" for page in reader.pages]
    except Exception as exc:  # pypdf raises many types for damaged files; the user needs the file name
        raise DocumentError(f"{path}: cannot read the PDF ({type(exc).__name__}: {exc})") from None
    return [Section(text, "", {"format": "pdf", "page": str(number)})
            for number, text in enumerate(pages, start=1) if text.strip()]


def chunk_file(path: Path, chunk_size: int, chunk_overlap: int) -> list[Chunk]:
    """Read a supported file and cut it into chunks; DocumentError when it gives none."""
    check_settings(chunk_size, chunk_overlap)
    suffix = path.suffix.lower()
    if suffix in MARKDOWN_SUFFIXES:
        chunks = chunk_sections(markdown_sections(read_text(path)), chunk_size, chunk_overlap)
    elif suffix in CSV_SUFFIXES:
        chunks = chunk_records(csv_records(read_text(path)), chunk_size, chunk_overlap)
    elif suffix in TEXT_SUFFIXES:
        chunks = chunk_sections([Section(read_text(path), "", {"format": "text"})], chunk_size, chunk_overlap)
    elif suffix in PDF_SUFFIXES:
        if not path.is_file():
            read_text(path)  # the same "no such file" message as every other type
        chunks = chunk_sections(pdf_sections(path), chunk_size, chunk_overlap)
    else:
        raise DocumentError(f"{path}: unsupported file type {suffix or '(none)'}; supported: {SUPPORTED}")
    if not chunks:
        raise DocumentError(f"{path}: no text to ingest")
    return chunks
