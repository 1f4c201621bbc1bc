"""The package's shape: no import cycles, and data flowing one way
(env -> EnvLoop -> ReplayBuffer -> ReplayStream -> TD3.training_step)."""

from __future__ import annotations

import ast
import functools
import inspect
import re
from pathlib import Path

import pytest

import td3_lightning
from td3_lightning import EnvLoop, ReplayDataModule, TD3
from td3_lightning.errors import UserInputError
from td3_lightning.usage import declared_groups

PACKAGE = Path(td3_lightning.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the td3_lightning modules it imports, at module level or inside functions."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                    + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_finds_a_known_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert {"td3_lightning.module", "td3_lightning.envloop", "td3_lightning.cli"} <= set(graph)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_module_imports_no_env_code_and_the_env_loop_no_update():
    graph = import_graph()

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    assert not reach("td3_lightning.module") & {"td3_lightning.envloop", "td3_lightning.callbacks",
                                                 "td3_lightning.data", "td3_lightning.envs"}
    assert "td3_lightning.module" not in reach("td3_lightning.envloop")
    assert "td3_lightning.envloop" not in reach("td3_lightning.data")  # the stream knows the loop by interface


def test_training_without_the_env_loop_says_how_to_add_it():
    import lightning as L

    dm = ReplayDataModule("Pendulum-v1", warmup_steps=10, batch_size=4, buffer_size=100)
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[8])
    trainer = L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", devices=1)
    with pytest.raises(UserInputError, match=r"^ReplayDataModule needs the EnvLoop callback to step the envs: "
                                             r"L\.Trainer\(callbacks=\[td3_lightning\.EnvLoop\(\)\]\)$"):
        trainer.fit(model, dm)
    assert isinstance(EnvLoop(), L.Callback)


def test_the_td3_class_reads_on_a_few_screens():
    """The paper's algorithm and the Lightning plumbing it needs; options live in extensions/. Its docstring, the
    options' one-line help (``--help``), is counted apart: one line per option."""
    tree = ast.parse((PACKAGE / "module.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TD3")
    docstring = cls.body[0]
    assert isinstance(docstring, ast.Expr) and isinstance(docstring.value, ast.Constant)
    options = [p for p in inspect.signature(TD3).parameters]
    assert docstring.end_lineno - docstring.lineno + 1 <= len(options) + 8  # a summary and one line per option
    assert (cls.end_lineno - cls.lineno + 1) - (docstring.end_lineno - docstring.lineno + 1) <= 215
    update = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "td3_update")
    assert update.end_lineno - update.lineno + 1 <= 25


PRIVATE_LIGHTNING = re.compile(
    r"\b(trainer|strategy|parser|cli|self|LightningCLI|fit_loop|epoch_loop|connector)\._(?!_)(get|lightning_optimizers|"
    r"option_string_actions|subcommand_parsers|results|data_fetcher|batches_that_stepped|optimizer_step|"
    r"checkpoint_connector|logger_connector|accelerator_connector)\b")


def test_private_lightning_and_jsonargparse_attributes_are_used_in_lightning_py_only():
    assert PRIVATE_LIGHTNING.search("x = trainer.strategy._lightning_optimizers") is not None  # the pattern bites
    users = [p.name for p in PACKAGE.rglob("*.py")
             if p.name != "_lightning.py" and PRIVATE_LIGHTNING.search(p.read_text())]
    assert users == []
    assert PRIVATE_LIGHTNING.search((PACKAGE / "_lightning.py").read_text()) is not None


def _calls(source: str) -> list[str]:
    """The names called in ``source`` (``f(...)`` and ``x.f(...)``)."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            names.append(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def test_the_update_is_written_once_and_captured_as_it_is():
    """captured.py runs the module's own td3_update: it calls none of the update's parts itself."""
    calls = _calls((PACKAGE / "captured.py").read_text())
    assert "td3_update" in calls
    assert not {"critic_loss", "actor_loss", "update_targets", "td_target"} & set(calls)
    assert "critic_loss(" not in (PACKAGE / "captured.py").read_text()  # the pattern above bites on a plain call too
    assert _calls("x.critic_loss(b)") == ["critic_loss"]


def test_the_env_loop_asks_the_module_through_its_methods_not_its_attributes():
    """No reach-through from the env loop into the module's parts (policy checkpoints, networks)."""
    source = (PACKAGE / "envloop.py").read_text()
    reach = re.compile(r"getattr\((pl_module|module|trainer\.lightning_module)\b|\.policy_checkpoint\b")
    assert reach.search('getattr(pl_module, "policy_checkpoint", None)') is not None  # the pattern bites
    assert reach.findall(source) == []


def test_production_code_has_no_test_switches():
    """Tests choose a path by patching the function that chooses it, not through a flag kept in the package."""
    switches = re.compile(r"\b(eager_on_cpu|direct_update|finite_check_every_step)\s*[:=]")
    assert switches.search("    direct_update: bool | None = None") is not None  # the pattern bites
    assert [p.name for p in PACKAGE.rglob("*.py") if switches.search(p.read_text())] == []


def test_what_cudagraphs_cannot_run_is_checked_in_one_phase():
    callers = [p.name for p in PACKAGE.rglob("*.py") if "check_capture_options(" in p.read_text()
               and p.name != "captured.py"]
    assert callers == ["cli.py"]
    assert (PACKAGE / "captured.py").read_text().count("check_capture_options(") == 1  # its definition only


@functools.cache
def _call_sites() -> dict[str, set[str]]:
    """Called name -> ``file:function`` of each call of it in the package (``f(...)`` or ``x.f(...)``)."""
    sites: dict[str, set[str]] = {}

    def visit(node: ast.AST, path: Path, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = f"{where}.{child.name}".lstrip(".") if isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else where
            if isinstance(child, ast.Call):
                func = child.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                sites.setdefault(name, set()).add(f"{path.relative_to(PACKAGE)}:{inner}")
            visit(child, path, inner)

    for path in PACKAGE.rglob("*.py"):
        visit(ast.parse(path.read_text()), path, "")
    return sites


def _callers(name: str) -> set[str]:
    return _call_sites().get(name, set())


def test_the_run_is_validated_in_one_pass():
    """What the built run is asked to do (the checkpoint against the env, the processes, the episodes, the teacher,
    policy checkpoints, options that do nothing, memory and disk) is checked by ``validation.py`` alone; what needs
    no env, by one call of ``check_options`` once the checkpoint is resolved."""
    source = (PACKAGE / "validation.py").read_text()
    checks = sorted({name for name in _calls(source) if name.startswith(("check_", "warn_if_")) or name in (
        "idle_options",)} - {"check_checkpoint_spaces"})
    assert {"check_episodes", "check_teacher", "check_policy_checkpoint_options", "check_same_processes",
            "check_replay_memory", "check_extensions_act", "idle_options"} <= set(checks), checks
    # a Python user's resume: the Trainer names its checkpoint only when it restores it; a loader refuses what it
    # cannot load, whoever calls it
    restored = {"check_same_processes": {"distributed.py:unpack_rank_state"},
                "check_teacher": {"extensions/teacher.py:load_teacher"}}
    elsewhere = {name: callers for name in checks
                 if (callers := {c for c in _callers(name) if not c.startswith("validation.py:")}
                     - restored.get(name, set()))}
    assert elsewhere == {}
    assert _callers("validate_run") == {"cli.py:TD3CLI.instantiate_trainer", "validation.py:validate_once"}
    assert _callers("validate_once") == {"data.py:ReplayDataModule.setup"}
    # tune checks the bounds of its search space the way fit checks a value
    assert _callers("check_options") == {"cli.py:TD3CLI.read_checkpoint_hparams", "tune.py:check_space"}
    assert _callers("check_same_processes") >= {"validation.py:_checkpoint_against_run"}  # the walk finds calls


#: check functions with more than one caller, and why (any other check has one: it runs in one phase)
SHARED_CHECKS = {
    "check_declared": "the machinery: each option group's check reads its own declarations",
    "check_rules": "the machinery: each named list of rules",
    "check_checkpoint": "each command reads its own file: the run's checkpoint, a teacher, export's source",
    "check_checkpoint_file": "export checks its --ckpt_path before it reads it",
    "check_checkpoint_meta": "a file read by the command line, and one loaded by Lightning",
    "check_checkpoint_spaces": "the pass, and the failure path of a model built from another env's checkpoint",
    "check_folder_option": "the Trainer's folder options and tune's",
    "check_options": "the run, and tune's check of its search space's bounds",
    "check_selection_options": "the command line (with the checkpoints to choose among) and the constructor",
    "check_same_processes": "the pass, and a Python user's resume when the Trainer restores it",
    "check_teacher": "the pass, and the loader, which refuses what it cannot load",
    "check_layout": "the pass (a fit's checkpoint, before anything is written), and each buffer's loader",
    "check_finite": "a guard of the weights at saving, evaluating and acting, not of input",
}


def test_no_check_is_called_from_more_than_one_phase():
    defined = set()
    for path in PACKAGE.rglob("*.py"):
        defined |= {node.name for node in ast.walk(ast.parse(path.read_text()))
                    if isinstance(node, ast.FunctionDef) and node.name.startswith("check")}
    shared = {name for name in defined if len({c for c in _callers(name) if not c.endswith(f":{name}")}) > 1}
    assert shared == set(SHARED_CHECKS), shared ^ set(SHARED_CHECKS)
    assert {"check_options", "check_episodes", "check_capture_options", "check_policy_checkpoint_options"} <= defined


def test_no_declared_range_or_choice_is_written_a_second_time():
    """A range lives in its option's help line, a set of choices in its ``Literal`` type: no refusal names the
    option's range by hand and no check tests its choices by hand (the generated table of docs aside)."""
    from td3_lightning.declarations import options_of

    sources = {p.name: p.read_text() for p in PACKAGE.rglob("*.py") if p.name != "_usage_text.py"}
    written = [f"{file}: {match[0]}" for file, text in sources.items() for group in declared_groups()
               for match in re.finditer(rf"{group}\.\{{\w+\}} must be", text)]  # a loop over options' ranges
    for group, cls in declared_groups().items():
        for name, option in options_of(cls).items():
            if option.range is None and not option.choices:
                continue
            by_hand = re.compile(rf"{group}\.{name} must be|[\[(]['\"]{name}['\"][^\]\n]*[\])]\s*(?:not )?in [(\[{{]")
            written += [f"{file}: {match[0]}" for file, text in sources.items() for match in by_hand.finditer(text)]
    from td3_lightning.declarations import parse_range
    from td3_lightning.tune import _parser

    for action in _parser().actions():  # tune's own options: the range in their help is the check
        if parse_range(action.help or "")[0] is not None:
            written += [f"tune.py: {m[0]}" for m in re.finditer(rf"--{action.dest} must be", sources["tune.py"])]
    assert written == []


def test_every_check_reads_the_range_its_help_shows():
    from td3_lightning.declarations import options_of

    ranged = {f"{group}.{name}": option for group, cls in declared_groups().items()
              for name, option in options_of(cls).items() if option.range is not None or option.choices}
    assert len(ranged) >= 45
    assert ranged["model.gamma"].takes() == "in [0, 1]" and ranged["model.tau"].takes() == "in (0, 1] (1 = hard copy)"
    assert ranged["model.critic_bins"].takes() == "0 (off) or >= 2"
    assert ranged["model.encoder"].takes() == "auto, cnn or none" and ranged["data.sampler"].takes() == "uniform or lap"
    for key, option in ranged.items():  # the refusal says what the help says
        if option.range is not None and not option.range.zero_off:
            assert option.range.words() in option.help and option.note in option.help, key
