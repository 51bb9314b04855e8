"""The fixed-phrase cache's bookkeeping: keys, marking, its size bound, its files."""

from __future__ import annotations

from pathlib import Path

from voicegate.internal.tts.phrases import FixedPhrases, chunks


def test_the_key_changes_with_the_voice_the_rate_and_the_text_but_not_with_spacing() -> None:
    key = FixedPhrases.key("piper\x00abc\x00length_scale=1.0", 8000, "Hello there.")
    assert key == FixedPhrases.key("piper\x00abc\x00length_scale=1.0", 8000, "  Hello\nthere. ")
    assert key != FixedPhrases.key("piper\x00abd\x00length_scale=1.0", 8000, "Hello there.")
    assert key != FixedPhrases.key("piper\x00abc\x00length_scale=1.1", 8000, "Hello there.")
    assert key != FixedPhrases.key("piper\x00abc\x00length_scale=1.0", 16000, "Hello there.")
    assert key != FixedPhrases.key("piper\x00abc\x00length_scale=1.0", 8000, "Hello there!")


def test_only_marked_texts_are_cached_and_a_zero_size_cache_marks_nothing() -> None:
    phrases = FixedPhrases(1000)
    phrases.mark("Hello.", "", "   ")
    assert phrases.marked("Hello.") and phrases.marked(" Hello. ")
    assert not phrases.marked("Goodbye.")
    assert phrases.texts == {"Hello."}
    off = FixedPhrases(0)
    off.mark("Hello.")
    assert not off.marked("Hello.")


def test_the_least_recently_said_phrase_leaves_first_past_the_size_bound() -> None:
    phrases = FixedPhrases(10)
    phrases.put("a", b"1234")
    phrases.put("b", b"5678")
    assert phrases.get("a") == b"1234"  # now the most recent
    phrases.put("c", b"90ab")
    assert phrases.get("b") is None and phrases.get("a") == b"1234" and phrases.get("c") == b"90ab"
    assert phrases.size_bytes == 8
    phrases.put("huge", bytes(11))  # larger than the whole cache: not kept, nothing evicted for it
    assert phrases.get("huge") is None and len(phrases) == 2


def test_renders_on_disk_are_found_by_a_new_cache_and_unreadable_ones_are_misses(tmp_path: Path) -> None:
    first = FixedPhrases(100, tmp_path / "cache")
    first.put("k", b"\x01\x02")
    assert FixedPhrases(100, tmp_path / "cache").get("k") == b"\x01\x02"
    assert list((tmp_path / "cache").iterdir()) == [tmp_path / "cache" / "k.pcm"]
    blocked = tmp_path / "file"
    blocked.write_bytes(b"")
    cache = FixedPhrases(100, blocked / "cache")  # cannot be created: kept in memory only
    cache.put("k", b"\x01\x02")
    assert cache.get("k") == b"\x01\x02" and FixedPhrases(100, blocked / "cache").get("k") is None


def test_a_phrase_is_said_in_chunks_that_join_to_it() -> None:
    pcm = bytes(range(256)) * 30
    assert b"".join(chunks(pcm, 1000)) == pcm
    assert all(len(chunk) == 1000 for chunk in list(chunks(pcm, 1000))[:-1])


async def test_callers_asking_for_one_phrase_at_once_share_one_render_and_a_hang_up_does_not_stop_it() -> None:
    import asyncio

    phrases = FixedPhrases(1000)
    renders = 0
    release = asyncio.Event()

    async def render() -> bytes:
        nonlocal renders
        renders += 1
        await release.wait()
        return b"\x01\x02" * 10

    first = asyncio.create_task(phrases.said("greeting", render))
    others = [asyncio.create_task(phrases.said("greeting", render)) for _ in range(3)]
    await asyncio.sleep(0)
    first.cancel()  # that caller hung up
    release.set()
    assert await asyncio.gather(*others) == [b"\x01\x02" * 10] * 3
    assert renders == 1
    assert await phrases.said("greeting", render) == b"\x01\x02" * 10 and renders == 1  # kept


async def test_a_failed_render_reaches_every_caller_waiting_for_it_and_is_not_kept() -> None:
    import asyncio

    import pytest

    phrases = FixedPhrases(1000)

    async def broken() -> bytes:
        await asyncio.sleep(0)
        raise RuntimeError("Piper died")

    results = await asyncio.gather(phrases.said("k", broken), phrases.said("k", broken), return_exceptions=True)
    assert [type(r) for r in results] == [RuntimeError, RuntimeError]
    assert phrases.get("k") is None
    with pytest.raises(RuntimeError):
        await phrases.said("k", broken)


def test_the_node_s_fixed_lines_are_its_greetings_apologies_idle_prompts_and_recording_words() -> None:
    from voicegate.internal.config import Config
    from voicegate.internal.pipeline.responder import APOLOGY, TOO_BUSY
    from voicegate.server.providers import fixed_phrases

    config = Config()
    assert fixed_phrases(config) == [config.pipeline.greeting, TOO_BUSY, APOLOGY, config.pipeline.idle_prompt,
                                     config.pipeline.idle_goodbye]  # no outgoing greeting set
    config.pipeline.idle_hangup_s = 0
    assert config.pipeline.idle_goodbye not in fixed_phrases(config)
    config.pipeline.idle_prompt_s = 0
    assert config.pipeline.idle_prompt not in fixed_phrases(config)
    config.recording.enabled, config.recording.consent = True, "ask"
    assert config.recording.question in fixed_phrases(config)
    config.recording.consent = "announce"
    assert f"{config.recording.announcement} {config.pipeline.greeting}" in fixed_phrases(config)
    config.sip.transfer_targets = {"sales": "sip:sales@example.com"}
    config.amd.enabled, config.amd.voicemail_message = True, "Please call us back."
    assert {config.warm_transfer.hold_message, "Please call us back."} <= set(fixed_phrases(config))


def test_marking_reaches_only_providers_that_keep_phrases() -> None:
    from types import SimpleNamespace

    from voicegate.internal.tts.phrases import mark_fixed

    keeps = SimpleNamespace(phrases=FixedPhrases(1000))
    assert mark_fixed(keeps, "One moment.") and keeps.phrases.marked("One moment.")
    assert not mark_fixed(SimpleNamespace(), "One moment.")
