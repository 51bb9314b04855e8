"""The project's modules import each other without circles (ARCHITECTURE: dependencies point one way).

Every import counts, also those inside functions (a lazy import hides a circle, it does not untie
it) and those under `if TYPE_CHECKING:` (a circle of types is still two modules that must change
together; issue 43 untied the last one). Modules are named as Python imports them, `voicegate.*`.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("internal", "server", "scripts", "bench")
IMPORT_PREFIX = {"internal": "voicegate.", "server": "voicegate.", "scripts": "", "bench": ""}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return IMPORT_PREFIX[parts[0]] + ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST, module: str, is_package: bool, known: set[str], types: bool = True) -> set[str]:
    """The project modules `tree` imports (`from a import b` counts `a.b` when that is a module);
    `types=False` leaves out those under `if TYPE_CHECKING:`."""
    found: set[str] = set()
    for node in ast.iter_child_nodes(tree):
        if not types and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            if base in known:
                found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known)
        found |= imported(node, module, is_package, known, types)
    return found


def sources(package: str) -> list[Path]:
    """The package's own modules: not those of bench/.pipecat-venv (Pipecat's virtual environment)."""
    return [path for path in (REPO / package).rglob("*.py") if ".pipecat-venv" not in path.parts]


def import_graph() -> dict[str, set[str]]:
    files = {module_name(path): path for package in PACKAGES for path in sources(package)}
    known = set(files)
    return {name: imported(ast.parse(path.read_text()), name, path.name == "__init__.py", known) - {name}
            for name, path in files.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_finder_sees_a_circle_through_a_lazy_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    source = "def f():\n    from voicegate.internal.x import y\n"
    both = {"voicegate.internal.x", "voicegate.internal.x.y"}
    assert imported(ast.parse(source), "voicegate.internal.z", False, both) == both
    guarded = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from voicegate.internal.x import y\n"
    assert imported(ast.parse(guarded), "voicegate.internal.z", False, {"voicegate.internal.x"}) == {
        "voicegate.internal.x"}  # a type-only import counts
    assert imported(ast.parse(guarded), "voicegate.internal.z", False, {"voicegate.internal.x"},
                    types=False) == set()


def test_no_module_of_the_project_is_in_an_import_circle() -> None:
    graph = import_graph()
    assert {"voicegate.server.cli", "voicegate.internal.sip.ua", "voicegate.internal.rag.ingest",
            "voicegate.internal.session.manager", "scripts.cluster"} <= set(graph)
    assert circles(graph) == [], "modules that import each other, types included (a dependency must point one way)"


def test_the_benchmarks_subjects_depend_one_way() -> None:
    """bench/ is grouped by subject (capacity, speech, turns, ...; bench/README.md): a subject may use another's
    pieces (capacity calls as the voice-to-voice benchmark does) but never both ways, and bench/common uses
    none of them. Issue 43 untied bench/speech.py <-> bench/speech_noise.py."""
    graph = import_graph()
    assert {"bench.common.figures", "bench.speech.recognition", "bench.speech.noisy_lines",
            "bench.turns.turn_taking", "bench.capacity.conversations"} <= set(graph)
    subject = lambda module: ".".join(module.split(".")[:2])  # noqa: E731
    subjects: dict[str, set[str]] = {}
    for module, imports in graph.items():
        if module.startswith("bench."):
            subjects.setdefault(subject(module), set()).update(
                subject(name) for name in imports if name.startswith("bench.") and subject(name) != subject(module))
    assert circles(subjects) == [], "benchmark subjects that import each other"
    assert subjects["bench.common"] == set(), "bench/common is what the subjects share: it imports none of them"


def test_make_bench_runs_only_benchmarks_that_are_there() -> None:
    from bench.run_all import BENCHMARKS, missing

    assert len(BENCHMARKS) > 10 and missing() == []


def test_nothing_imports_the_old_top_level_names() -> None:
    """`server` and `internal` are folders, not import packages: every import says `voicegate.`."""
    offending = []
    for package in (*PACKAGES, "tests", "examples", "voicegate"):
        for path in sources(package):  # (rglob does not enter voicegate/server, a link)
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
                offending += [f"{path.relative_to(REPO)}: {n}" for n in names
                              if n.split(".")[0] in ("server", "internal")]
    assert offending == []


def every_import(path: Path, known: set[str]) -> set[str]:
    """All project modules a file imports, those under `if TYPE_CHECKING:` included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("voicegate."):
            found.add(node.module)
            names = {f"{node.module}.{alias.name}" for alias in node.names}
            found.update(names & known)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("voicegate."))
    return found


def test_the_pipeline_and_the_turn_see_a_call_only_through_its_context() -> None:
    """session -> pipeline -> turn, one way: the pipeline gets a narrow CallContext (internal/conversation),
    never the Session, not even for a type, and none of the features that plug into it (they register
    tools and read voice activity through it: docs/architecture.md); the tool registry (internal/tools/
    registry.py) is the contract they register through, not a feature; the turn's owner never imports the
    pipeline."""
    known = set(import_graph())
    features = tuple(f"voicegate.internal.{name}" for name in ("session", "telephony", "tools", "recording", "memory",
                                                               "sip.voice"))
    contracts = ("voicegate.internal.tools.registry",)
    banned_imports = (("pipeline", features), ("turn", ("voicegate.internal.pipeline",)))
    for package, banned in banned_imports:
        for path in (REPO / "internal" / package).rglob("*.py"):
            offending = {name for name in every_import(path, known)
                         if name.startswith(banned) and not name.startswith(contracts)}
            assert not offending, f"{path.relative_to(REPO)} imports {sorted(offending)}"


def test_sip_is_a_protocol_library_outside_its_voice_package() -> None:
    """internal/sip parses, serialises and runs SIP; only internal/sip/voice/ (what a call is to voicegate)
    reaches the session, the pipeline, the phone flows or memory."""
    known = set(import_graph())
    banned = ("pipeline", "session", "telephony", "memory")
    sip = REPO / "internal" / "sip"
    for path in sip.rglob("*.py"):
        if path.is_relative_to(sip / "voice"):
            continue
        offending = {name for name in every_import(path, known)
                     if name.split(".")[:3] in (["voicegate", "internal", package] for package in banned)}
        assert not offending, f"{path.relative_to(REPO)} imports {sorted(offending)}"


def test_every_import_of_voicegate_names_a_module_that_exists() -> None:
    """mypy runs with ignore_missing_imports (for third-party packages without types), so it does not
    catch an import of a voicegate module that was moved or renamed: this does, for every file that
    imports voicegate, lazy and type-only imports included."""
    known = {name for name in import_graph() if name.startswith("voicegate.")} | {
        "voicegate", "voicegate.memory", "voicegate.tools", "voicegate.migrations", "voicegate.internal",
        "voicegate.server"}
    missing = []
    for package in (*PACKAGES, "tests", "bench", "examples", "voicegate"):
        for path in (REPO / package).rglob("*.py"):
            if ".pipecat-venv" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("voicegate"):
                    names = [node.module or ""]
                elif isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names if alias.name.startswith("voicegate")]
                else:
                    continue
                missing += [f"{path.relative_to(REPO)}: {name}" for name in names
                            if name not in known and not any(k.startswith(name + ".") for k in known)]
    assert missing == []
