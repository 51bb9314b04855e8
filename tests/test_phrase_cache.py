"""The fixed-phrase cache's bookkeeping: keys, marking, its size bounds, its files and their checks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from voicegate.internal.tts.phrase_files import HEADER, BadPhraseFile, Entry, leftover, pack, to_prune, unpack
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
    key = FixedPhrases.key("voice", 8000, "Hello.")
    first = FixedPhrases(100, tmp_path / "cache")
    first.put(key, b"\x01\x02")
    assert FixedPhrases(100, tmp_path / "cache").get(key) == b"\x01\x02"
    assert list((tmp_path / "cache").iterdir()) == [tmp_path / "cache" / f"{key}.phrase"]
    blocked = tmp_path / "file"
    blocked.write_bytes(b"")
    cache = FixedPhrases(100, blocked / "cache")  # cannot be created: kept in memory only
    cache.put(key, b"\x01\x02")
    assert cache.get(key) == b"\x01\x02" and FixedPhrases(100, blocked / "cache").get(key) is None


def on_disk(directory: Path) -> dict[str, int]:
    return {path.name: path.stat().st_size for path in directory.iterdir()}


def test_the_files_on_disk_stay_within_the_bound_the_least_recently_said_leaving_first(tmp_path: Path) -> None:
    a, b, c = (FixedPhrases.key("voice", 8000, text) for text in ("A.", "B.", "C."))
    audio = bytes(range(100))
    file_size = HEADER.size + len(audio)
    phrases = FixedPhrases(2 * file_size + 10, tmp_path)  # two files fit, not three
    phrases.put(a, audio)
    phrases.put(b, audio)
    assert phrases.get(a) == audio  # said from memory: its file is the most recently used now
    phrases.put(c, audio)
    assert on_disk(tmp_path) == {f"{a}.phrase": file_size, f"{c}.phrase": file_size}
    restarted = FixedPhrases(2 * file_size + 10, tmp_path)
    assert restarted.get(a) == audio and restarted.get(c) == audio and restarted.get(b) is None


def test_a_cache_opening_on_a_directory_prunes_it_to_its_bound_and_clears_leftovers(tmp_path: Path) -> None:
    audio = bytes(range(100))
    keys = [FixedPhrases.key("voice", 8000, f"Phrase {n}.") for n in range(5)]
    big = FixedPhrases(1 << 20, tmp_path)
    for key in keys:
        big.put(key, audio)
    for age, key in enumerate(reversed(keys)):  # keys[0] used longest ago, keys[4] last
        os.utime(tmp_path / f"{key}.phrase", (1_700_000_000 - age, 1_700_000_000 - age))
    (tmp_path / "old.pcm").write_bytes(audio)  # the first version's file: raw audio with no check
    (tmp_path / "crashed.part").write_bytes(audio[:50])  # a write cut short by a crash long ago
    os.utime(tmp_path / "crashed.part", (1_700_000_000, 1_700_000_000))
    (tmp_path / "writing.part").write_bytes(audio[:50])  # another process's write in flight
    FixedPhrases(2 * (HEADER.size + len(audio)), tmp_path)
    assert set(on_disk(tmp_path)) == {f"{keys[3]}.phrase", f"{keys[4]}.phrase", "writing.part"}
    FixedPhrases(0, tmp_path)  # 0: no cache, on disk either
    assert set(on_disk(tmp_path)) == {"writing.part"}


def test_the_pruning_policy_deletes_just_enough_of_the_least_recently_used() -> None:
    entries = [Entry(Path(name), used, 10) for name, used in (("new", 3), ("old", 1), ("mid", 2))]
    assert [e.path.name for e in to_prune(entries, 30)] == []
    assert [e.path.name for e in to_prune(entries, 29)] == ["old"]
    assert [e.path.name for e in to_prune(entries, 10)] == ["old", "mid"]
    assert [e.path.name for e in to_prune(entries, 0)] == ["old", "mid", "new"]
    assert leftover("x.pcm", 0) and leftover("x.part", 61) and not leftover("x.part", 1)
    assert not leftover(f"{'0' * 64}-8000.phrase", 10**9)


@pytest.mark.parametrize("damage", ["truncated", "a flipped byte", "no header", "another rate",
                                    "another phrase's file", "a different length", "empty"])
def test_a_file_that_fails_its_check_is_deleted_and_never_said(tmp_path: Path, damage: str) -> None:
    key = FixedPhrases.key("voice", 8000, "Hello.")
    other = FixedPhrases.key("voice", 8000, "Goodbye.")
    audio = bytes(range(200))
    FixedPhrases(1 << 20, tmp_path).put(key, audio)
    path = tmp_path / f"{key}.phrase"
    good = path.read_bytes()
    assert unpack(key, good) == audio
    damaged = {
        "truncated": good[:-7],
        "a flipped byte": good[:-50] + bytes([good[-50] ^ 1]) + good[-49:],
        "no header": audio,
        "another rate": pack(key, 16000, audio),  # a good digest, but not at the rate the key is for
        "another phrase's file": pack(other, 8000, audio),
        "a different length": good + b"\x00\x00",
        "empty": b"",
    }[damage]
    path.write_bytes(damaged)
    with pytest.raises(BadPhraseFile):
        unpack(key, damaged)
    phrases = FixedPhrases(1 << 20, tmp_path)
    assert phrases.get(key) is None and not path.exists()
    phrases.put(key, audio)  # rendered again: kept with a good check
    assert unpack(key, path.read_bytes()) == audio


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
