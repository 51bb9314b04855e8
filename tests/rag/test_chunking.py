"""Chunking: word windows with overlap, Markdown sections, CSV records, and the file readers."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from voicegate.internal.rag.chunking import (
    ChunkingError,
    DocumentError,
    chunk_file,
    chunk_records,
    csv_records,
    markdown_sections,
    word_windows,
)


def words(n: int) -> str:
    return " ".join(f"w{i}" for i in range(n))


def test_windows_share_the_overlap_with_the_previous_window() -> None:
    windows = word_windows(words(10), chunk_size=4, chunk_overlap=1)
    assert windows == ["w0 w1 w2 w3", "w3 w4 w5 w6", "w6 w7 w8 w9"]


def test_the_last_window_ends_at_the_last_word_and_is_never_only_overlap() -> None:
    assert word_windows(words(5), chunk_size=4, chunk_overlap=2) == ["w0 w1 w2 w3", "w2 w3 w4"]
    assert word_windows(words(4), chunk_size=4, chunk_overlap=2) == ["w0 w1 w2 w3"]


def test_short_text_is_one_window_and_blank_text_none() -> None:
    assert word_windows("just three words", chunk_size=120, chunk_overlap=20) == ["just three words"]
    assert word_windows("  \n\t ", chunk_size=120, chunk_overlap=20) == []


def test_windows_keep_the_source_whitespace_between_their_words() -> None:
    assert word_windows("line one\nline  two", chunk_size=10, chunk_overlap=0) == ["line one\nline  two"]


@pytest.mark.parametrize(("size", "overlap"), [(0, 0), (5, 5), (5, 6), (5, -1)])
def test_impossible_settings_are_refused_with_a_reason(size: int, overlap: int) -> None:
    with pytest.raises(ChunkingError, match="chunk"):
        word_windows(words(20), size, overlap)


@given(st.lists(st.text(alphabet="abcxyz", min_size=1, max_size=6), max_size=80),
       st.integers(1, 12), st.integers(0, 11))
def test_windows_cover_every_word_in_order_with_exact_overlap(tokens: list[str], size: int, overlap: int) -> None:
    if overlap >= size:
        return
    windows = word_windows(" ".join(tokens), size, overlap)
    assert all(window.strip() for window in windows)
    split = [window.split() for window in windows]
    assert all(len(w) <= size for w in split)
    rebuilt = split[0] if split else []
    for previous, current in itertools.pairwise(split):
        assert previous[-overlap:] == current[:overlap] if overlap else True
        rebuilt += current[overlap:]
    assert rebuilt == tokens
    assert word_windows(" ".join(tokens), size, overlap) == windows  # stable


def test_markdown_sections_carry_their_heading_trail() -> None:
    text = (
        "Intro before any heading.\n"
        "# Store\n"
        "## Opening hours\n"
        "Sunday 11am to 3pm.\n"
        "## Parking ##\n"
        "Behind the building.\n"
        "# Other\n"
        "Text.\n"
    )
    sections = markdown_sections(text)
    assert [(s.heading, s.text) for s in sections] == [
        ("", "Intro before any heading."),
        ("Store > Opening hours", "Sunday 11am to 3pm."),
        ("Store > Parking", "Behind the building."),
        ("Other", "Text."),
    ]


def test_headings_inside_code_fences_and_front_matter_are_not_sections() -> None:
    text = "---\ntitle: FAQ\n---\n# Setup\n```sh\n# not a heading\nmake\n```\n#hashtag is text\n"
    sections = markdown_sections(text)
    assert len(sections) == 1
    assert sections[0].heading == "Setup"
    assert "# not a heading" in sections[0].text and "#hashtag is text" in sections[0].text
    assert "title: FAQ" not in sections[0].text


def test_every_chunk_of_a_long_markdown_section_starts_with_its_heading(tmp_path: Path) -> None:
    path = tmp_path / "faq.md"
    path.write_text("# Returns\n" + words(25) + "\n")
    chunks = chunk_file(path, chunk_size=10, chunk_overlap=2)
    assert len(chunks) == 3
    assert all(chunk.content.startswith("Returns\n") for chunk in chunks)
    assert [c.index for c in chunks] == [0, 1, 2]
    assert chunks[0].metadata == {"format": "markdown", "heading": "Returns"}


def test_csv_rows_become_column_value_records_without_empty_cells() -> None:
    text = "item,price,notes\nEspresso,2.50,\n,,\n\"Flat white, large\",3.40,oat milk\nTea,1.80,green,extra\n"
    assert csv_records(text) == [
        "item: Espresso; price: 2.50",
        "item: Flat white, large; price: 3.40; notes: oat milk",
        "item: Tea; price: 1.80; notes: green; column 4: extra",
    ]


def test_semicolon_and_tab_separated_files_are_read_too() -> None:
    assert csv_records("a;b\n1;2\n") == ["a: 1; b: 2"]
    assert csv_records("a\tb\n1\t2\n") == ["a: 1; b: 2"]


def test_csv_records_are_packed_whole_and_a_long_record_is_cut_alone() -> None:
    records = ["a: 1; b: 2", "a: 3; b: 4", "a: 5; b: 6", words(12)]
    chunks = chunk_records(records, chunk_size=8, chunk_overlap=2)
    assert [c.content for c in chunks][:2] == ["a: 1; b: 2\na: 3; b: 4", "a: 5; b: 6"]
    assert [c.metadata["rows"] for c in chunks] == ["1-2", "3", "4", "4"]
    assert all(len(c.content.split()) <= 8 for c in chunks)


def test_text_files_are_chunked_and_identical_input_gives_identical_chunks(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text(words(30))
    first = chunk_file(path, chunk_size=12, chunk_overlap=3)
    again = chunk_file(path, chunk_size=12, chunk_overlap=3)
    assert first == again
    assert [c.content_hash for c in first] == [c.content_hash for c in again]
    assert len({c.content_hash for c in first}) == len(first)


def test_a_utf8_bom_is_not_part_of_the_text(tmp_path: Path) -> None:
    path = tmp_path / "bom.txt"
    path.write_bytes("\ufeffhello world".encode())
    assert chunk_file(path, 10, 0)[0].content == "hello world"


@pytest.mark.parametrize(("name", "data", "message"), [
    ("missing.txt", None, "no such file"),
    ("empty.md", b"# Only a heading\n", "no text to ingest"),
    ("latin1.txt", "caf\xe9".encode("latin-1"), "not UTF-8"),
    ("slides.pptx", b"x", "unsupported file type .pptx"),
    ("manual.pdf", b"%PDF-1.4", "pypdf|cannot read the PDF"),  # either way, named
])
def test_files_that_cannot_be_ingested_say_why(tmp_path: Path, name: str, data: bytes | None, message: str) -> None:
    path = tmp_path / name
    if data is not None:
        path.write_bytes(data)
    with pytest.raises(DocumentError, match=message) as raised:
        chunk_file(path, 120, 20)
    assert str(path) in str(raised.value)
