"""No import cycle among the project's modules.

Every ``.py`` of the project's packages is parsed with ``ast`` (nothing is imported); each
``import``/``from ... import`` anywhere in the file counts, at module level or inside a function,
because a function-local import only hides a cycle, it does not break it. Relative imports are
resolved, and ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to
``pkg`` (so a package ``__init__`` that re-exports its submodules is no cycle, but a submodule
that takes a name back from that ``__init__`` is). Imports under ``if TYPE_CHECKING:`` are
annotations for the type checker, never executed, and are not edges. The graph, restricted to project modules,
must have no strongly connected component of more than one module.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "srifty_web",
    "accounts",
    "catalog",
    "profiler",
    "planner",
    "launcher",
    "cloud",
    "frontend",
    "fleet",
    "workload",
)
SKIP_DIRS = {".venv", "tests", "bench", "migrations", "__pycache__", "node_modules", "static", "templates"}


def project_modules() -> dict[str, Path]:
    """Dotted module name -> file, for every project package that exists."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        base = ROOT / package
        if not (base / "__init__.py").exists():
            continue
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(ROOT)
            if SKIP_DIRS.intersection(rel.parts[:-1]):
                continue
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Project modules that ``name`` imports, anywhere in its file."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), filename=str(path))
    targets: set[str] = set()
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                # ``from pkg import submodule`` is an edge to the submodule; ``from pkg import
                # name`` (a function, a class, a constant) is an edge to ``pkg`` itself.
                targets.add(submodule if submodule in modules else base)
    edges: set[str] = set()
    for target in targets:
        parts = target.split(".")  # ``import a.b`` where ``a.b`` is a module, or its nearest module
        while parts and ".".join(parts) not in modules:
            parts.pop()
        if parts:
            edges.add(".".join(parts))
    edges.discard(name)
    return edges


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST):
    """Every node but those under ``if TYPE_CHECKING:`` (annotations only, never executed)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the graph has hundreds of modules)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                out.append(sorted(component))
    return out


def a_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One concrete cycle inside a strongly connected component, for the failure message."""
    members = set(component)
    start = component[0]
    path, seen = [start], {start}
    node = start
    while True:
        nxt = sorted(graph[node] & members)
        if start in nxt and len(path) > 1:
            return [*path, start]
        fresh = [n for n in nxt if n not in seen]
        if not fresh:  # walk back into the component until the start is reachable
            nxt_any = nxt[0]
            i = path.index(nxt_any) if nxt_any in path else None
            return [*path[i:], nxt_any] if i is not None else path
        node = fresh[0]
        path.append(node)
        seen.add(node)


def test_the_graph_sees_the_project():
    graph = import_graph()
    assert "launcher.tasks" in graph and "profiler.tasks" in graph and "planner.app.service" in graph
    assert "launcher.jobs" in graph["launcher.tasks"]  # a module-level import
    assert "planner.app.models" in graph["launcher.models"] or "srifty_web.teams" in graph["launcher.models"]


def test_no_import_cycle_among_project_modules():
    graph = import_graph()
    cycles = [c for c in strongly_connected(graph) if len(c) > 1]
    message = "\n".join(
        f"cycle among {len(c)} modules: {', '.join(c)}\n  e.g. {' -> '.join(a_cycle(graph, c))}"
        for c in cycles
    )
    assert not cycles, "import cycles (function-local imports count too):\n" + message


def test_a_function_local_import_is_an_edge_and_a_type_checking_one_is_not(tmp_path):
    pkg = tmp_path / "cyc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cyc import b\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n    return a\n")
    modules = {"cyc": pkg / "__init__.py", "cyc.a": pkg / "a.py", "cyc.b": pkg / "b.py"}
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    assert graph["cyc.a"] == {"cyc.b"} and graph["cyc.b"] == {"cyc.a"}
    assert ["cyc.a", "cyc.b"] in strongly_connected(graph)
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cyc import a\n")
    assert imports_of("cyc.b", pkg / "b.py", modules) == set()


def imported_names(name: str, path: Path) -> set[str]:
    """Every dotted module name the file of ``name`` imports, project or not, at any depth and
    under ``if TYPE_CHECKING:`` too (an annotation-only import is still a dependency of the layer),
    relative imports resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                found.add(".".join(parts + ([node.module] if node.module else [])))
            else:
                found.add(node.module or "")
    return found


def _under(module: str, roots: tuple[str, ...]) -> bool:
    return any(module == root or module.startswith(root + ".") for root in roots)


def arrows(sources: tuple[str, ...], targets: tuple[str, ...], skip: tuple[str, ...] = ()) -> list[str]:
    """``module -> imported`` for every module under ``sources`` (not under ``skip``) that imports
    anything under ``targets``."""
    out = []
    for name, path in sorted(project_modules().items()):
        if _under(name, sources) and not _under(name, skip):
            out += [f"{name} -> {t}" for t in sorted(imported_names(name, path)) if _under(t, targets)]
    return out


def test_nothing_under_planner_imports_the_profiler():
    """The profiler imports the planner (its charts draw the planner's models, its refit task
    calls ``planner.app.comm_training``), so the planner never imports the profiler back, not
    even its Django app: the pure planner reads models through ``workload`` (specs, tracing,
    the schema of a workload); ``planner.app`` reads the profiler's records through its own
    port (``planner.app.ports.ProfileStore``, served by ``profiler.planning``) and takes the
    input-shape helpers both apps share from ``srifty_web.input_shape`` and
    ``catalog.gpu_memory``. Function-level and type-only imports count."""
    assert not arrows(("planner",), ("profiler",))


def test_the_planner_apps_profile_port_is_served_by_the_profilers_adapter_once_django_is_set_up():
    """``ProfilerConfig.ready`` registers the adapter (pytest-django has set Django up)."""
    from planner.app.ports import ProfileStore, profile_store
    from profiler.planning import ProfilerStore

    store: ProfileStore = profile_store()
    assert isinstance(store, ProfilerStore)


def test_nothing_under_planner_imports_the_gpu_agent():
    assert not arrows(("planner",), ("profiler.agent",))


def test_workload_imports_no_web_no_planner_and_no_profiler():
    """The ground floor: the agent (a bare torch bundle) and the planner both stand on it."""
    found = arrows(("workload",), ("django", "rest_framework", "planner", "profiler", "launcher", "fleet"))
    assert not found
    assert not [a for a in arrows(("workload",), PACKAGES) if not a.split(" -> ")[1].startswith("workload")]


def test_the_launcher_and_the_profiler_do_not_import_each_other():
    """What both apps need of a node before training (boot scripts, network settings, the
    rendezvous, the agent bundle) and what judges both apps' nodes (the reconciler) lives in
    ``fleet``, above them; request helpers live in ``srifty_web``. Function-level and
    type-only imports count."""
    assert not arrows(("launcher",), ("profiler",))
    assert not arrows(("profiler",), ("launcher",))


def test_the_app_import_check_sees_a_function_local_import(tmp_path):
    (tmp_path / "api.py").write_text("def f():\n    from profiler.api import content_length\n")
    found = imported_names("launcher.api", tmp_path / "api.py")
    assert [t for t in found if _under(t, ("profiler",))] == ["profiler.api"]


def test_the_import_walk_sees_type_checking_and_relative_imports(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from profiler.models import X\n"
        "def f():\n    from . import b\n    import django.db\n"
    )
    assert imported_names("pkg.a", pkg / "a.py") == {"typing", "profiler.models", "pkg", "django.db"}


def test_the_mix_bound_asks_the_oracle_through_its_protocol_without_importing_it():
    """planner.oracle imports planner.mix_bound; the bound states what it asks as a Protocol."""
    assert not arrows(("planner.mix_bound",), ("planner.oracle",))


def test_the_explanations_use_the_engine_protocol_without_importing_the_search():
    """planner.solver.search imports planner.solver.explain; explain types the engine it is
    handed with the ``Engine`` protocol of planner.solver.request (type-only imports count)."""
    assert not arrows(("planner.solver.explain",), ("planner.solver.search",))


def test_the_pure_planner_reads_only_plain_catalog_modules():
    """The catalog owns the parsing of its own fields (``catalog.network``: the stated network
    performance); the pure planner may import such a module only while it, and the catalog
    package itself, import no Django."""
    modules = project_modules()
    read = {a.split(" -> ")[1] for a in arrows(("planner",), ("catalog",), skip=("planner.app",))}
    assert "catalog.network" in read  # planner.hardware takes the network field's parser from it
    for name in sorted(read | {"catalog"}):
        assert name in modules, f"{name}: the pure planner imports a name, not a module, of the catalog"
        web = [t for t in imported_names(name, modules[name]) if _under(t, ("django", "rest_framework"))]
        assert not web, f"{name} imports {web}: the pure planner cannot read it"


# What fits a model: the performance models and their fits (planner.perf, planner.perf if it is
# renamed so), the calibrated transfer model, the oracle that builds them, the corpora they are
# fitted on, the comm model's refit, and the fitting libraries.
MODEL_FITTING = (
    "planner.perf",
    "planner.perf",
    "planner.calibration",
    "planner.oracle",
    "planner.corpus",
    "planner.nccl_corpus",
    "planner.app.comm_training",
    "xgboost",
    "sklearn",
    "lightgbm",
    "scipy",
)


def test_the_pages_import_no_model_fitting_code():
    """Pages only render: chart data comes from ``profiler.charts`` (or ``planner.app``), never
    from a fit in ``frontend/``. Forbidden, at module level, in a function or under
    ``if TYPE_CHECKING:``: ``planner.perf`` and ``planner.perf`` (the performance models and
    their fits), ``planner.calibration`` (the calibrated transfer model), ``planner.oracle`` (builds
    the models a solve asks), ``planner.corpus`` and ``planner.nccl_corpus`` (the data they are
    fitted on), ``planner.app.comm_training`` (the NCCL model's refit), and the fitting libraries
    ``xgboost``, ``sklearn``, ``lightgbm`` and ``scipy``. Direct imports only: a page may call
    ``planner.app`` or ``profiler`` functions that fit behind their own doors."""
    assert not arrows(("frontend",), MODEL_FITTING)


def test_the_page_import_check_sees_a_function_local_fit(tmp_path):
    (tmp_path / "charts.py").write_text("def f():\n    from planner.perf.compute import fit_compute_model\n")
    found = imported_names("frontend.charts", tmp_path / "charts.py")
    assert [t for t in found if _under(t, MODEL_FITTING)] == ["planner.perf.compute"]
