"""The project's modules depend one way (ARCHITECTURE: dependencies point one way), as docs/architecture.md's
layer table says.

The table (under "`internal/` packages, lowest first") is data here: read as one list, row by row and left
to right within a row, it is the order of voicegate.internal's packages, lowest first, and a module may import
only modules of its own package or of packages before its package in that list. Below them all stand
voicegate/_import_name.py, the migrations (package data) and voicegate/internal/__init__.py; above them, in
this order, the public extension API (voicegate/memory.py, voicegate/tools.py), server/ (the composition root)
and the `voicegate` package's own face (__init__, __main__). scripts/ and bench/ stand outside: they may use
any of it, and each other one way only.

Every import counts: those inside functions (a lazy import hides a circle, it does not untie it), those under
`if TYPE_CHECKING:` (two modules that name each other's types still change together), and those a package's
`__init__.py` makes when it loads (importing `voicegate.internal.sip.message` first runs
`voicegate/internal/sip/__init__.py`, so whatever that imports is imported too). Modules are named as Python
imports them, `voicegate.*`.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOTS = ("voicegate", "scripts", "bench")
INTERNAL = "voicegate.internal"
# Outside the table: what every package stands on, and what stands on all of them (the module docstring).
GROUND = ("voicegate._import_name", "voicegate.migrations", INTERNAL)
ABOVE_THE_TABLE = (("voicegate.memory", "voicegate.tools"), ("voicegate.server",), ("voicegate.__main__", "voicegate"))
OUTSIDE = ("scripts", "bench")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources(root: str) -> list[Path]:
    """The root's own modules: not those of bench/.pipecat-venv (Pipecat's virtual environment)."""
    return [path for path in (REPO / root).rglob("*.py") if ".pipecat-venv" not in path.parts]


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imported(tree: ast.AST, module: str, is_package: bool, known: set[str], at_load: bool = False) -> set[str]:
    """The project modules `tree` imports (`from a import b` counts `a.b` when that is a module, `import a.b.c`
    the longest known prefix). `at_load=True`: only those it imports when it loads, not those inside functions
    nor under `if TYPE_CHECKING:`."""
    found: set[str] = set()
    for node in ast.iter_child_nodes(tree):
        if at_load and (_type_checking(node) or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))):
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                while name and name not in known:
                    name = name.rpartition(".")[0]
                found.update([name] if name else [])
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                found.update({f"{base}.{alias.name}"} if f"{base}.{alias.name}" in known else
                             {base} & known)
        found |= imported(node, module, is_package, known, at_load)
    return found


def ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


@cache
def files() -> dict[str, Path]:
    return {module_name(path): path for root in ROOTS for path in sources(root)}


@cache
def import_graph() -> dict[str, frozenset[str]]:
    """Module -> the modules importing it runs. Importing `a.b.c` from outside package `a.b` also runs
    `a/__init__.py` and `a/b/__init__.py` (those not already running: not the importer's own packages), so
    what they import when they load is imported too."""
    known = set(files())
    trees = {name: ast.parse(path.read_text()) for name, path in files().items()}
    packages = {name for name, path in files().items() if path.name == "__init__.py"}
    at_load = {name: imported(trees[name], name, True, known, at_load=True) for name in packages}
    graph = {}
    for name, tree in trees.items():
        direct = imported(tree, name, name in packages, known)
        own = set(ancestors(name))
        through = {edge for target in direct for package in ancestors(target)
                   if package in packages and package not in own for edge in at_load[package]}
        graph[name] = frozenset((direct | through) - {name})
    return graph


def circles(graph: dict[str, frozenset[str]] | dict[str, set[str]]) -> list[list[str]]:
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


def table_tokens(text: str) -> list[list[str]]:
    """The `packages` cell of each row of the layer table, as the names written in backticks, in order."""
    section = text.split("`internal/` packages, lowest first", 1)[1]
    rows = []
    for line in section.splitlines()[1:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0] in ("layer", "---"):
            continue
        rows.append(re.findall(r"`([^`]+)`", cells[1]))
    return rows


def table_module(token: str) -> str:
    """`sip/voice/` -> voicegate.internal.sip.voice; `event_envelope.py` -> voicegate.internal.event_envelope."""
    return ".".join([INTERNAL, *token.removesuffix(".py").strip("/").split("/")])


@cache
def layers() -> list[tuple[str, ...]]:
    """Every unit of the house, lowest first; a unit is a package or module prefix."""
    table = [table_module(token) for row in table_tokens((REPO / "docs" / "architecture.md").read_text())
             for token in row]
    return [GROUND, *((name,) for name in table), *ABOVE_THE_TABLE]


def unit(module: str) -> str:
    """The unit a module belongs to: the longest prefix that names a unit (sip/voice/ is not sip)."""
    units = {name for names in layers() for name in names} | set(OUTSIDE)
    for prefix in [module, *reversed(ancestors(module))]:
        if prefix in units:
            return prefix
    raise AssertionError(f"{module} belongs to no row of docs/architecture.md's layer table")


def rank(module: str) -> int:
    name = unit(module)
    if name in OUTSIDE:
        return len(layers())
    return next(place for place, names in enumerate(layers()) if name in names)


def wrong_way(graph: dict[str, frozenset[str]]) -> list[str]:
    return sorted(f"{module} -> {target}" for module, targets in graph.items() for target in targets
                  if rank(target) > rank(module))


def two_way_pairs(graph: dict[str, frozenset[str]]) -> list[tuple[str, str]]:
    edges = {(unit(module), unit(target)) for module, targets in graph.items() for target in targets}
    return sorted((a, b) for a, b in edges if a < b and (b, a) in edges)


def test_the_finder_sees_a_circle_through_a_lazy_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    source = "def f():\n    from voicegate.internal.x import y\n"
    both = {"voicegate.internal.x", "voicegate.internal.x.y"}
    assert imported(ast.parse(source), "voicegate.internal.z", False, both) == {"voicegate.internal.x.y"}
    guarded = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from voicegate.internal.x import y\n"
    assert imported(ast.parse(guarded), "voicegate.internal.z", False, {"voicegate.internal.x"}) == {
        "voicegate.internal.x"}  # a type-only import counts
    assert imported(ast.parse(guarded), "voicegate.internal.z", False, {"voicegate.internal.x"},
                    at_load=True) == set()
    assert imported(ast.parse(source), "voicegate.internal.z", False, both, at_load=True) == set()


def test_the_graph_counts_what_a_package_init_imports_when_it_loads() -> None:
    """Importing a module of voicegate.internal.sip runs sip/__init__.py, and with it what that imports."""
    graph = import_graph()
    init = imported(ast.parse(files()["voicegate.internal.sip"].read_text()), "voicegate.internal.sip", True,
                    set(files()), at_load=True)
    assert "voicegate.internal.sip.ua" in init
    importers = [module for module, targets in graph.items()
                 if "voicegate.internal.sip.message" in targets and not module.startswith("voicegate.internal.sip")]
    assert importers and all(init <= graph[module] for module in importers)
    # ... but not for a module of sip itself: its package is already loading when it runs
    assert "voicegate.internal.sip.ua" not in graph["voicegate.internal.sip.message"]


def test_the_layer_table_names_every_package_once() -> None:
    table = [name for names in layers()[1:-len(ABOVE_THE_TABLE)] for name in names]
    assert len(table) > 25 and len(set(table)) == len(table), "a package in two rows"
    assert {"voicegate.internal.config", "voicegate.internal.sip", "voicegate.internal.sip.voice",
            "voicegate.internal.event_envelope", "voicegate.internal.session"} <= set(table)
    missing = [name for name in files() if name.startswith(INTERNAL + ".") and unit(name) == INTERNAL]
    assert missing == [], "modules of voicegate.internal in no row of the layer table"
    stale = [name for name in table if not any(module == name or module.startswith(name + ".") for module in files())]
    assert stale == [], "the layer table names packages that are not there"


def test_no_import_runs_down_the_layer_table_the_wrong_way() -> None:
    """A module imports only its own package's modules and those of the packages below it."""
    assert wrong_way(import_graph()) == []


def test_no_two_packages_import_each_other() -> None:
    assert two_way_pairs(import_graph()) == []


def test_no_module_of_the_project_is_in_an_import_circle() -> None:
    graph = import_graph()
    assert {"voicegate.server.cli", "voicegate.internal.sip.ua", "voicegate.internal.rag.ingest",
            "voicegate.internal.session.manager", "scripts.cluster"} <= set(graph)
    assert circles(graph) == [], "modules that import each other, types included (a dependency must point one way)"


IMPORT_EACH = textwrap.dedent("""
    import importlib, json, os, sys
    layers = json.loads(sys.argv[1])
    names = [name for layer in layers for name in layer]
    # What the project uses from elsewhere loads once, here (a child finds out what that is).
    probe = os.fork()
    if probe == 0:
        for name in names:
            try:
                importlib.import_module(name)
            except BaseException:
                pass
        with open(os.environ["THIRD_PARTY"], "w") as out:
            out.write("\\n".join(m for m in sys.modules if m.split(".")[0] not in ("voicegate", "__main__")))
        os._exit(0)
    os.waitpid(probe, 0)
    for name in open(os.environ["THIRD_PARTY"]).read().split():
        try:
            importlib.import_module(name)
        except BaseException:
            pass
    # Then layer by layer, lowest first: each module of a layer is imported first of its line in a fork of
    # this process, which holds only the layers below (all a module may import), then the whole layer here.
    failed = 0
    for layer in layers:
        for name in layer:
            if name in sys.modules:
                print(f"{name}: loaded before its layer's turn (a module below it imports it)", flush=True)
                failed += 1
                continue
            child = os.fork()
            if child == 0:
                try:
                    importlib.import_module(name)
                except BaseException as exc:
                    print(f"{name}: {type(exc).__name__}: {exc}", flush=True)
                    os._exit(1)
                os._exit(0)
            failed += os.waitpid(child, 0)[1] != 0
        for name in layer:
            try:
                importlib.import_module(name)
            except BaseException:
                pass
    sys.exit(1 if failed else 0)
""")


def test_every_module_of_voicegate_imports_first_of_its_line(tmp_path: Path) -> None:
    """`python -c "import voicegate.x.y"` works for every module: a circle the graph cannot see (an import
    through a name bound at load) still fails here. A module imported after another of its circle loads; only
    first of its line does it fail, so each is imported in a fresh fork. The fork holds the layers below the
    module's own, already loaded: a module imports nothing else, so a circle through it lies in its own
    layer, none of which is loaded (and this keeps the test to seconds)."""
    names = sorted(name for name in files() if name.split(".")[0] == "voicegate")
    # A package loads with the first module under it: `voicegate` (the face, above all) goes with the lowest.
    place = {name: min(rank(module) for module in names if module == name or module.startswith(name + "."))
             for name in names}
    by_rank: dict[int, list[str]] = {}
    for name in names:
        by_rank.setdefault(place[name], []).append(name)
    layered = [by_rank[place] for place in sorted(by_rank)]
    result = subprocess.run([sys.executable, "-c", IMPORT_EACH, json.dumps(layered)], cwd=REPO, capture_output=True,
                            text=True, env={"PATH": "/usr/bin:/bin", "THIRD_PARTY": str(tmp_path / "third_party")})
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]


def test_the_benchmarks_subjects_depend_one_way() -> None:
    """bench/ is grouped by subject (capacity, speech, turns, ...; bench/README.md): a subject may use another's
    pieces (capacity calls as the voice-to-voice benchmark does) but never both ways, and bench/common uses
    none of them."""
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
    """`server` and `internal` are links for readers, not import packages: every import says `voicegate.`."""
    offending = []
    for root in (*ROOTS, "tests", "examples"):
        for path in sources(root):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
                offending += [f"{path.relative_to(REPO)}: {n}" for n in names
                              if n.split(".")[0] in ("server", "internal")]
    assert offending == []


def test_every_import_of_voicegate_names_a_module_that_exists() -> None:
    """mypy runs with ignore_missing_imports (for third-party packages without types), so it does not
    catch an import of a voicegate module that was moved or renamed: this does, for every file that
    imports voicegate, lazy and type-only imports included."""
    known = {name for module in files() if module.startswith("voicegate")
             for name in (module, *ancestors(module))}  # a folder without __init__.py imports too
    missing = []
    for root in (*ROOTS, "tests", "examples"):
        for path in sources(root):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("voicegate"):
                    names = [node.module or ""]
                elif isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names if alias.name.startswith("voicegate")]
                else:
                    continue
                missing += [f"{path.relative_to(REPO)}: {name}" for name in names if name not in known]
    assert missing == []
