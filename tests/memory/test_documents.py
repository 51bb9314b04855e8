"""Exact-edit semantics, stated as plain string operations and checked with generated edit sequences."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from voicegate.internal.memory.documents import TRUNCATION_NOTICE, EditError, append, project_for_model, replace

LIMIT = 2000


def test_append_adds_a_line() -> None:
    assert append("", "- Likes tea.", LIMIT) == "- Likes tea."
    assert append("- A.", "- B.", LIMIT) == "- A.\n- B."
    assert append("- A.\n", "- B.", LIMIT) == "- A.\n- B."


def test_replace_needs_exactly_one_match() -> None:
    text = "- Likes tea.\n- Likes coffee.\n"
    assert replace(text, "tea", "green tea", LIMIT) == "- Likes green tea.\n- Likes coffee.\n"
    with pytest.raises(EditError) as missing:
        replace(text, "cocoa", "x", LIMIT)
    assert missing.value.code == "edit_not_found"
    with pytest.raises(EditError) as ambiguous:
        replace(text, "Likes", "Loves", LIMIT)
    assert ambiguous.value.code == "ambiguous_edit" and "2 times" in ambiguous.value.message


def test_deleting_a_whole_line_leaves_no_blank_line() -> None:
    text = "- Likes tea.\n- Likes coffee.\n"
    assert replace(text, "- Likes tea.", "", LIMIT) == "- Likes coffee.\n"
    assert replace(text, "tea", "", LIMIT) == "- Likes .\n- Likes coffee.\n"  # a fragment is just removed


def test_edits_that_would_exceed_the_limit_are_refused() -> None:
    with pytest.raises(EditError) as too_long:
        append("x" * 15, "yyyyy", 20)
    assert too_long.value.code == "too_long"
    with pytest.raises(EditError):
        append("", "   ", LIMIT)
    with pytest.raises(EditError):
        replace("abc", "", "x", LIMIT)


def test_projection_strips_markdown_comments_and_marks_truncation() -> None:
    doc = "<!-- template: one fact per line -->\n- Name: Sam.\n\n\n\n- Plan: pro.\n"
    assert project_for_model(doc, "markdown", 100) == ("- Name: Sam.\n\n- Plan: pro.", False)
    assert project_for_model(doc, "text", 100)[0].startswith("<!--")  # plain text is not Markdown
    long_doc = "\n".join(f"- Fact number {i}." for i in range(100))
    projected, truncated = project_for_model(long_doc, "markdown", 200)
    assert truncated and len(projected) <= 200 and projected.endswith(TRUNCATION_NOTICE)
    assert projected.startswith("- Fact number 0.")


words = st.sampled_from(["tea", "coffee", "Sam", "plan", "pro", "- ", "\n", "likes", " ", "."])
text_st = st.lists(words, min_size=1, max_size=6).map("".join)
edit_st = st.one_of(
    st.tuples(st.just("append"), text_st, st.just("")),
    st.tuples(st.just("replace"), text_st, text_st),
    st.tuples(st.just("replace"), text_st, st.just("")),
)


def reference(content: str, edit: tuple[str, str, str]) -> str | None:
    """The meaning of an edit in terms of str methods; None where the edit must fail."""
    kind, a, b = edit
    if kind == "append":
        addition = a.strip("\n")
        if not addition.strip():
            return None
        return addition if not content else content + ("" if content.endswith("\n") else "\n") + addition
    if not a or content.count(a) != 1:
        return None
    start = content.index(a)
    end = start + len(a)
    whole_line = (start == 0 or content[start - 1] == "\n") and end < len(content) and content[end] == "\n"
    if not b and whole_line:
        end += 1
    return content[:start] + b + content[end:]


@settings(max_examples=300, deadline=None)
@given(st.lists(edit_st, max_size=12))
def test_any_sequence_of_edits_matches_the_string_model_and_failures_change_nothing(
        edits: list[tuple[str, str, str]]) -> None:
    document = ""
    for edit in edits:
        expected = reference(document, edit)
        kind, a, b = edit
        try:
            result = append(document, a, LIMIT) if kind == "append" else replace(document, a, b, LIMIT)
        except EditError:
            assert expected is None or len(expected) > LIMIT
            continue  # the document is unchanged: `document` is not reassigned
        assert result == expected
        document = result
