"""Fixed phrases said from the cache, with real Piper: the same bytes every time, a fresh render where Piper
is deterministic, and a new render whenever the voice, its settings, the rate or the text change."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from voicegate.internal.config.providers import PiperConfig
from voicegate.internal.tts.phrase_files import HEADER, unpack
from voicegate.internal.tts.phrases import FixedPhrases
from voicegate.internal.tts.piper import PiperTextToSpeech, resolve_voice
from voicegate.internal.tts.piper_voice import voice_config_path

pytestmark = pytest.mark.asyncio(loop_scope="module")

GREETING = "Hello, this is voicegate. How can I help you?"


def quiet_voice(directory: Path, noise: float = 0.0) -> Path:
    """The packaged voice with its settings file edited: without noise Piper renders a text the same way
    every time, so a cached phrase can be compared with a fresh render byte for byte."""
    model = resolve_voice(PiperConfig())
    directory.mkdir(parents=True, exist_ok=True)
    copy = directory / "joe-quiet.onnx"
    copy.symlink_to(model)
    settings = json.loads(voice_config_path(model).read_text())
    settings["inference"].update(noise_scale=noise, noise_w=noise)
    voice_config_path(copy).write_text(json.dumps(settings))
    return copy


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def voices(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Path]:
    yield tmp_path_factory.mktemp("voices")


async def say(engine: PiperTextToSpeech, text: str, rate: int = 8000) -> bytes:
    return b"".join([chunk async for chunk in engine.synthesize(text, rate)])


def engine(voice: Path, phrases: FixedPhrases, **settings: float) -> PiperTextToSpeech:
    return PiperTextToSpeech(PiperConfig(voice=str(voice), workers=1, **settings), phrases=phrases)


async def test_a_cached_phrase_is_byte_identical_to_a_fresh_render(voices: Path) -> None:
    phrases = FixedPhrases(1 << 20)
    tts = engine(quiet_voice(voices / "a"), phrases)
    try:
        fresh_before = await say(tts, GREETING)  # not marked yet: rendered
        phrases.mark(GREETING)
        cached_first = await say(tts, GREETING)  # marked: rendered once, kept
        served = tts.queue.taken
        cached_again = await say(tts, GREETING)
        assert tts.queue.taken == served  # from the cache: Piper was not asked
        fresh_after = b"".join([c async for c in tts._synthesize(GREETING, 8000)])
    finally:
        await tts.aclose()
    assert len(fresh_before) > 8000  # over half a second of speech
    assert cached_again == cached_first == fresh_before == fresh_after
    assert phrases.hits >= 1 and len(phrases) == 1


async def test_the_packaged_voice_says_a_phrase_the_same_way_every_time_from_the_cache(voices: Path) -> None:
    # Its noise makes each render differ a little: the first render is kept and said again.
    phrases = FixedPhrases(1 << 20)
    phrases.mark(GREETING)
    tts = PiperTextToSpeech(PiperConfig(workers=1), phrases=phrases)
    try:
        first, second = await say(tts, GREETING), await say(tts, GREETING)
        assert tts.queue.taken == 1
    finally:
        await tts.aclose()
    assert first == second and len(first) > 8000


@pytest.mark.parametrize("change", ["voice settings", "length scale", "speaker", "text", "rate"])
async def test_a_phrase_is_rendered_again_when_what_shapes_it_changes(voices: Path, change: str) -> None:
    phrases = FixedPhrases(4 << 20)
    voice = quiet_voice(voices / f"b-{change.replace(' ', '-')}")
    phrases.mark(GREETING, "Thanks for calling.")
    before = engine(voice, phrases)
    try:
        original = await say(before, GREETING)
    finally:
        await before.aclose()
    text, rate, settings = GREETING, 8000, {}
    if change == "voice settings":  # the same file name, edited: its SHA-256 changes
        voice_config_path(voice).write_text(voice_config_path(voice).read_text().replace('"noise_w": 0.0',
                                                                                          '"noise_w": 0.1'))
    elif change == "length scale":
        settings = {"length_scale": 1.3}
    elif change == "speaker":
        settings = {"speaker": 1}
    elif change == "text":
        text = "Thanks for calling."
    else:
        rate = 16000
    after = engine(voice, phrases, **settings)
    try:
        again = await say(after, text, rate)
        assert after.queue.taken == 1  # rendered, not taken from the cache
    finally:
        await after.aclose()
    assert len(phrases) == 2
    if change != "speaker":  # a single-speaker voice ignores the speaker: the same audio, still a new key
        assert again != original
    if change == "length scale":
        assert len(again) > 1.15 * len(original)


async def test_unchanged_voice_and_settings_share_the_cache_across_providers(voices: Path) -> None:
    phrases = FixedPhrases(1 << 20)
    phrases.mark(GREETING)
    voice = quiet_voice(voices / "c")
    first = engine(voice, phrases)
    try:
        kept = await say(first, GREETING)
    finally:
        await first.aclose()
    second = engine(voice, phrases)
    try:
        assert await say(second, GREETING) == kept
        assert second.queue.taken == 0
    finally:
        await second.aclose()


async def test_phrases_kept_on_disk_survive_a_restart_and_prepare_renders_each_once(voices: Path,
                                                                                    tmp_path: Path) -> None:
    voice = quiet_voice(voices / "d")
    phrases = FixedPhrases(1 << 20, tmp_path / "phrase-cache")
    phrases.mark(GREETING, "One moment.")
    tts = engine(voice, phrases)
    try:
        await tts.prepare([8000, 16000])
        assert tts.queue.taken == 2  # one render per phrase, resampled to both rates
        await tts.prepare([8000, 16000])
        assert tts.queue.taken == 2
        kept = await say(tts, "One moment.", 16000)
    finally:
        await tts.aclose()
    assert len(list((tmp_path / "phrase-cache").glob("*.phrase"))) == 4
    restarted = FixedPhrases(1 << 20, tmp_path / "phrase-cache")
    restarted.mark("One moment.")
    tts = engine(voice, restarted)
    try:
        assert await say(tts, "One moment.", 16000) == kept
        assert tts.queue.taken == 0
    finally:
        await tts.aclose()


@pytest.mark.parametrize("damage", ["tampered", "truncated"])
async def test_a_damaged_file_on_disk_is_never_said_but_rendered_again(voices: Path, tmp_path: Path,
                                                                       damage: str) -> None:
    voice = quiet_voice(voices / f"e-{damage}")
    first = FixedPhrases(1 << 20, tmp_path)
    first.mark(GREETING)
    tts = engine(voice, first)
    try:
        kept = await say(tts, GREETING)
    finally:
        await tts.aclose()
    [path] = tmp_path.glob("*.phrase")
    data = path.read_bytes()
    # Tampered: the audio replaced by as much silence. Truncated: the second half lost, as in a disk full.
    path.write_bytes(data[: len(data) - len(kept)] + bytes(len(kept)) if damage == "tampered"
                     else data[: len(data) // 2])
    restarted = FixedPhrases(1 << 20, tmp_path)
    restarted.mark(GREETING)
    tts = engine(voice, restarted)
    try:
        said = await say(tts, GREETING)
        assert tts.queue.taken == 1  # rendered again, not read from the damaged file
    finally:
        await tts.aclose()
    assert said == kept
    again = FixedPhrases(1 << 20, tmp_path)  # and the file written anew passes its check
    assert again.get(next(iter(tmp_path.glob("*.phrase"))).stem) == kept


async def node(directory: Path, voice: Path, max_bytes: int, out: Path, *texts: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.providers.phrase_cache_node", str(directory), str(voice), str(max_bytes),
        str(out), *texts, cwd=Path(__file__).resolve().parents[2])


def node_said(out: Path) -> tuple[int, list[bytes]]:
    taken, *said = out.read_text().splitlines()
    return int(taken), [bytes.fromhex(line) for line in said]


async def test_processes_sharing_the_directory_read_what_each_other_wrote_within_one_bound(
        voices: Path, tmp_path: Path) -> None:
    voice = quiet_voice(voices / "f")
    shared = tmp_path / "phrase-cache"
    texts = [GREETING, "One moment.", "Thanks for calling."]
    # Two nodes at once, each saying all three: they write the same files and prune one directory.
    nodes = [await node(shared, voice, 1 << 20, tmp_path / f"out-{n}", *texts) for n in range(2)]
    assert [await asyncio.wait_for(process.wait(), 240) for process in nodes] == [0, 0]
    said = [node_said(tmp_path / f"out-{n}")[1] for n in range(2)]
    assert said[0] == said[1] and all(len(pcm) > 4000 for pcm in said[0])
    # A third, started after them, renders nothing: everything it says comes from their files.
    third = await node(shared, voice, 1 << 20, tmp_path / "out-third", *texts)
    assert await asyncio.wait_for(third.wait(), 240) == 0
    assert node_said(tmp_path / "out-third") == (0, said[0])
    # One with room for the greeting alone: as it opens it prunes the directory to that bound, the
    # greeting going first (the third node used it longest ago) and the last phrase used staying; the
    # greeting, rendered again, then fits only once the others have gone.
    bound = HEADER.size + len(said[0][0])
    small = await node(shared, voice, bound, tmp_path / "out-small", "Thanks for calling.", GREETING)
    assert await asyncio.wait_for(small.wait(), 240) == 0
    assert node_said(tmp_path / "out-small") == (1, [said[0][2], said[0][0]])  # from the file, then a render
    files = {path.name: path.read_bytes() for path in shared.iterdir()}
    assert sum(len(data) for data in files.values()) <= bound
    assert [unpack(Path(name).stem, data) for name, data in files.items()] == [said[0][0]]


async def test_onnxruntime_threads_per_worker_come_from_the_config() -> None:
    from voicegate.internal.tts.piper_voice import piper_command

    command = piper_command(PiperConfig())
    check = ("import runpy, onnxruntime; "
             f"runpy.run_path({command[2]!r}, run_name='launcher').get('quiet_session_options')(1); "
             "print(onnxruntime.SessionOptions().intra_op_num_threads)")
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", check, stdout=asyncio.subprocess.PIPE)
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0 and out.decode().strip() == "1"


def renders(engine: PiperTextToSpeech) -> int:
    """Sentences the engine's workers were given."""
    return sum(slot.said for slot in engine.pool.slots)


async def test_a_sentence_said_before_is_said_again_from_memory_not_rendered(voices: Path) -> None:
    voice = quiet_voice(voices / "repeat")
    repeats = FixedPhrases(1 << 20)  # [tts] repeat_cache_mb: memory only, no directory
    piper = PiperTextToSpeech(PiperConfig(voice=str(voice), workers=1), repeats=repeats)
    try:
        first = await say(piper, "Is there anything else I can help you with?")
        given = renders(piper)
        again = await say(piper, "Is there  anything else I can help you with?")  # the same line to Piper
        assert again == first and renders(piper) == given and repeats.hits == 1
        assert await say(piper, "Is there anything else?") and renders(piper) == given + 1  # another text
        assert await say(piper, "Is there anything else I can help you with?", 16000)  # another rate
        assert renders(piper) == given + 2
    finally:
        await piper.aclose()


async def test_the_repeat_cache_keeps_its_bound_by_saying_the_least_recent_again(voices: Path) -> None:
    voice = quiet_voice(voices / "repeat-bound")
    older, newer = "The quick brown fox jumps over the lazy dog.", "Your order has been shipped today."
    probe = PiperTextToSpeech(PiperConfig(voice=str(voice), workers=1), repeats=FixedPhrases(0))
    try:
        sizes = [len(await say(probe, text)) for text in (older, newer)]
    finally:
        await probe.aclose()
    repeats = FixedPhrases(max(sizes) + min(sizes) // 2)  # room for either, not both
    piper = PiperTextToSpeech(PiperConfig(voice=str(voice), workers=1), repeats=repeats)
    try:
        await say(piper, older)
        await say(piper, newer)  # the older one is dropped for it
        assert repeats.size_bytes <= repeats.max_bytes and len(repeats) == 1
        given = renders(piper)
        await say(piper, newer)
        assert renders(piper) == given  # kept
        await say(piper, older)
        assert renders(piper) == given + 1  # dropped, so rendered again
    finally:
        await piper.aclose()


async def test_a_sentence_abandoned_mid_way_is_not_kept_and_is_rendered_whole_next_time(voices: Path) -> None:
    repeats = FixedPhrases(1 << 20)
    piper = PiperTextToSpeech(PiperConfig(voice=str(quiet_voice(voices / "barge")), workers=1), repeats=repeats)
    text = "This is a considerably longer sentence that goes on for quite a while, so it comes in pieces."
    try:
        stream = piper.synthesize(text, 8000)
        assert await anext(stream)  # the caller barges in after the first piece
        await stream.aclose()  # type: ignore[attr-defined]
        assert len(repeats) == 0
        whole = await say(piper, text)
        assert repeats.get(repeats.key(await piper.voice_identity(), 8000, text)) == whole
    finally:
        await piper.aclose()


async def test_fixed_phrases_stay_in_the_phrase_cache_not_the_repeat_cache(voices: Path) -> None:
    phrases, repeats = FixedPhrases(1 << 20), FixedPhrases(1 << 20)
    phrases.mark(GREETING)
    piper = PiperTextToSpeech(PiperConfig(voice=str(quiet_voice(voices / "both")), workers=1), phrases=phrases,
                              repeats=repeats)
    try:
        await say(piper, GREETING)
        await say(piper, "Sure.")
        assert (len(phrases), len(repeats)) == (1, 1)
    finally:
        await piper.aclose()
