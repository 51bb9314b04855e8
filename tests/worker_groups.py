"""Which tests `make test` (`-n 2 --dist loadgroup`) keeps together on one worker; tests/conftest.py hands
xdist the answer. Kept apart from the fixtures so that a small suite can use it too (tests/test_worker_groups.py)."""

from __future__ import annotations

import pytest


def worker_group(item: pytest.Item) -> str | None:
    """The tests `make test` (`-n 2 --dist loadgroup`) must run on one worker: those of an `xdist_group`
    mark (tests that share a session fixture across modules: the wheel, the evals' example run), and a
    module whose tests share a module-scoped fixture (a server, an installed venv, a loaded model), which
    each worker would otherwise build again. None: any worker, test by test."""
    marked = {str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
              for mark in item.iter_markers("xdist_group")}
    if marked:
        return "_".join(sorted(marked))
    info = getattr(item, "_fixtureinfo", None)
    shared = info is not None and any(defs and defs[-1].scope in ("module", "class")
                                      for defs in info.name2fixturedefs.values())
    return item.nodeid.split("::")[0] if shared else None


def keep_groups_together(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Hand xdist's loadgroup scheduler each test's group, as "@group" at the end of its node id (how xdist
    reads it); run from pytest_collection_modifyitems, after xdist's own. pytest-xdist 3.8 writes that suffix
    into `item._nodeid`, which pytest 9.2 no longer reads (it keeps a structured `item._id`): there every
    group was silently spread over both workers (github.com/pytest-dev/pytest-xdist/issues/1386), and each
    worker started the evals' servers and built the wheel again."""
    if not getattr(config.option, "loadgroup", False):  # set on xdist's workers under --dist loadgroup
        return
    for item in items:
        group = worker_group(item)
        if group is None or item.nodeid.endswith(f"@{group}"):
            continue
        nodeid = f"{item.nodeid}@{group}"  # (where xdist's own suffix took, it is this one: skipped above)
        if hasattr(item, "_id"):  # pytest >= 9.2: a structured id
            from _pytest.nodeid import NodeId

            item._id = NodeId.parse(nodeid)
        else:
            item._nodeid = nodeid
