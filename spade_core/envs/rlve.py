"""RLVE's environments as fixed-pool environments: names, difficulty parameters and jail bundles.

RLVE (PyPI ``rlve-gym`` 0.0.1, MIT; the authors vendor the same ``Gym`` package) ships 400 verifiable
environments, ``Gym/environments/<package>/environment.py``, each a ``VerifiableEnvironment`` whose
``generator(seed, parameter)`` draws a problem and whose ``verifier`` scores an ``<answer>``, and one
``ParameterController`` per environment whose ``update()`` steps the parameters up one difficulty level.

``designer.fixed_pool`` names them as the authors' ``RLVE_ENV_SET`` does (``cmd/games/train_fixed_rlve_4b.sh:28-43``):
``rlve:official16`` (their 16), ``rlve:all`` (every environment with a controller that can run in the jail) or
``rlve:NAME,...``. :func:`resolve` checks the names when the pool is first built, before anything is written.

Where they run (docs/environments.md): in the jail, like every environment. RLVE is package code, not model
output, but its generators and verifiers run arbitrary computation on model-controlled text, seed the
process-global ``random`` (and, in RLVE's own base class, ``numpy`` and ``torch``) on every problem, and
stop a slow generator by abandoning a thread; in the training process that would reseed the trainer's
RNGs and leak threads. :func:`bundle` makes one RLVE environment at one difficulty a standard-library
module that obeys the environment contract, so the rollout engine, scoring, the store and SQL treat it like
any environment: RLVE's environment source as the package ships it, RLVE's base class in standard-library
form (:mod:`spade_core.envs.rlve_base`, the way round its module-level ``torch`` import) and the parameter
list of that difficulty. An environment that imports more than the standard library (networkx: 30 of 400,
one of them ``ShortestPath`` of the official 16; numpy 3; sympy 3) runs there only if the jail's Python finds
the module among the system's packages and can import it there (:data:`JAIL_SITE`, under the read-only
``/usr``: Debian's ``python3-networkx`` and ``python3-sympy`` work; numpy's C extension does not load in the
jail); otherwise its name is refused.

The parameters of difficulty ``d`` are those of a fresh controller after ``d`` calls to ``update()``; a
problem picks one of them at random, as the authors' adapter (``spade/core/envs/rlve_adapter.py:72-90``).
A play's answer is RLVE's: the verifier reads the last ``<answer>...</answer>``; a ``\\boxed{X}`` in the
action is appended as ``<answer>X</answer>`` and the reward is 1 when the verifier's ``accuracy`` is 1,
else 0, in one turn (``rlve_adapter.py:151-177``). A generator that fails (RLVE's ``generator`` returns
False on any exception) is retried with fresh draws up to :data:`GENERATOR_ATTEMPTS` times
(``rlve_adapter.py:310-326``); if every draw fails, ``reset`` raises and the play is an error row. The
pool gives each environment one problem per generation, shared by all its plays (:func:`bundle`'s
``problem_seed``), as the authors' baseline (``--spade-fixed-env-same-problem``).
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.session import EnvSession
from spade_core.config import ConfigError

# cmd/games/train_fixed_rlve_4b.sh:30-37: RLVE_ENV_SET=official16
OFFICIAL16: tuple[str, ...] = (
    "Division",
    "EuclidGame",
    "GCDOne_Counting",
    "HamiltonianPath",
    "LampChanging",
    "LargestConvexPolygon",
    "Multiplication",
    "PCPPermutation",
    "Path_NoGoingBack_Counting",
    "SAT",
    "ShortestPath",
    "Sorting",
    "SpiralMatrix",
    "SubsequenceReversalLNDS",
    "UndamagedSubmatrixCounting",
    "WYRLevelingGround",
)
MAX_DIFFICULTY = 20  # rlve_adapter.py:200 (and SlidingWindowController's max_difficulty)
GENERATOR_ATTEMPTS = 10  # rlve_adapter.py:312: fresh (parameter, seed) draws before a problem is given up
# The instruction the authors append to an RLVE problem (spade/core/fixed_env_orchestrator.py:57-61).
ANSWER_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
PREFIX = "rlve:"
_JAIL_MODULES = frozenset({"Gym", "Gym.environment"})
# The system Python's packages (Debian), visible in the jail under the read-only /usr bind; a bundle whose
# environment imports more than the standard library puts it on sys.path.
JAIL_SITE = "/usr/lib/python3/dist-packages"


class RlveNameError(ConfigError):
    """A ``designer.fixed_pool`` RLVE name that does not exist or cannot run in the jail (a config error: the
    CLI prints it as one line)."""


@dataclass(frozen=True)
class RlveEnv:
    """One RLVE environment of the installed package."""

    name: str  # the identifier (identifier2environment's key), e.g. "Sorting"
    package: str  # Gym/environments/<package>/
    class_name: str
    source: str  # environment.py as the package ships it
    imports: frozenset[str]  # the top-level modules it imports

    @property
    def foreign_imports(self) -> tuple[str, ...]:
        """Imported modules that are neither the standard library nor RLVE's base class (sorted)."""
        return tuple(sorted(m for m in self.imports if m not in _JAIL_MODULES and m not in sys.stdlib_module_names))

    @property
    def jailable(self) -> bool:
        """Whether the jail's Python can import everything the environment imports."""
        return all(jail_has(m) for m in self.foreign_imports)


_PROBE = """import sys
sys.path.append({site!r})
import {module}


class Probe:
    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "", {{}}

    def step(self, action):
        return "", 0.0, True, False, {{}}

    def solution(self):
        return ""
"""


@functools.cache
def jail_has(module: str) -> bool:
    """Whether ``module`` imports in the jail from the system packages (:data:`JAIL_SITE`): a module found
    there may still fail in the jail (numpy's C extension needs its BLAS through ``/etc/alternatives``,
    which the jail does not mount), so the probe loads a module importing it in a real jail."""

    session = EnvSession(_PROBE.format(site=JAIL_SITE, module=module))
    try:
        return session.open().ok
    finally:
        session.close()


def gym_dir() -> Path:
    """The installed ``Gym`` package directory (``rlve-gym``)."""
    spec = importlib.util.find_spec("Gym")
    if spec is None or not spec.submodule_search_locations:
        raise RlveNameError("RLVE is not installed: pip install rlve-gym==0.0.1")
    return Path(next(iter(spec.submodule_search_locations)))


def _imports(tree: ast.Module) -> frozenset[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module if node.module in _JAIL_MODULES else node.module.split(".")[0])
    return frozenset(found)


@functools.cache
def catalog() -> dict[str, RlveEnv]:
    """Every environment of the installed RLVE, by name, read from the package's files (nothing imported)."""
    root = gym_dir() / "environments"
    tree = ast.parse((root / "__init__.py").read_text())
    module_of = {
        a.asname or a.name: node.module.rsplit(".", 1)[-1]
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module
        for a in node.names
    }
    table = next(
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "identifier2environment" for t in node.targets)
    )
    if not isinstance(table, ast.Dict):
        raise RlveNameError("RLVE's Gym/environments/__init__.py has no identifier2environment dict")
    envs = {}
    for key, value in zip(table.keys, table.values, strict=True):
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(value, ast.Name)):
            continue
        if value.id in module_of:
            package = module_of[value.id]
            source = (root / package / "environment.py").read_text()
            envs[key.value] = RlveEnv(key.value, package, value.id, source, _imports(ast.parse(source)))
    return envs


@functools.cache
def controllers() -> dict[str, Any]:
    """RLVE's ``identifier2controller`` (parameter controllers import only the standard library)."""
    from Gym.parameter_controllers import identifier2controller

    return dict(identifier2controller)


def _unknown(name: str, known: list[str]) -> RlveNameError:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5) or difflib.get_close_matches(
        name.lower(), [k.lower() for k in known], n=3, cutoff=0.5
    )
    lowered = {k.lower(): k for k in known}
    hints = [lowered.get(c, c) for c in close]
    suggestion = f"; close matches: {', '.join(hints)}" if hints else "; see `spade envs rlve`"
    return RlveNameError(f"designer.fixed_pool: unknown RLVE environment {name!r}{suggestion}")


def resolve(spec: str) -> tuple[str, ...]:
    """The RLVE environment names of ``designer.fixed_pool`` = ``spec``, in the given (or sorted) order.

    Raises:
        RlveNameError: one line: an unknown name with its close matches, or a name that needs a package the
            jail does not have.

    >>> resolve("rlve:official16")[:3]
    ('Division', 'EuclidGame', 'GCDOne_Counting')
    >>> resolve("rlve:Sorting,Multiplication")
    ('Sorting', 'Multiplication')
    >>> resolve("rlve:Sortin")
    Traceback (most recent call last):
    ...
    spade_core.envs.rlve.RlveNameError: designer.fixed_pool: unknown RLVE environment 'Sortin'; close matches: ...
    """
    body = spec.removeprefix(PREFIX)
    envs, known = catalog(), controllers()
    if body == "all":
        return tuple(sorted(n for n, e in envs.items() if n in known and e.jailable))
    names = list(OFFICIAL16) if body == "official16" else [n.strip() for n in body.split(",") if n.strip()]
    if not names:
        raise RlveNameError(f"designer.fixed_pool {spec!r}: no RLVE environment named")
    for name in names:
        if name not in envs or name not in known:
            raise _unknown(name, sorted(set(envs) & set(known)))
        if not envs[name].jailable:
            missing = [m for m in envs[name].foreign_imports if not jail_has(m)]
            raise RlveNameError(
                f"designer.fixed_pool: RLVE environment {name!r} imports {', '.join(missing)}, which the jail's "
                f"Python cannot import (it sees the system's packages in {JAIL_SITE}: pure-Python ones such as "
                "Debian's python3-networkx work there)"
            )
    return tuple(dict.fromkeys(names))


def parameters(name: str, difficulty: int) -> list[dict[str, Any]]:
    """The parameter dicts of difficulty ``difficulty`` (clamped to [0, MAX_DIFFICULTY]): a fresh controller
    after that many ``update()`` calls (``rlve_adapter.py:72-90``).

    >>> parameters("Sorting", 0), parameters("Sorting", 2)
    ([{'N': 3}], [{'N': 5}])
    """
    controller = controllers()[name]()
    for _ in range(max(0, min(difficulty, MAX_DIFFICULTY))):
        controller.update()
    return [dict(p) for p in controller.get_parameter_list()]


_BUNDLE = '''"""RLVE environment {name} at difficulty {difficulty}, played through the SPADE environment contract.

Built by spade_core.envs.rlve.bundle from the installed rlve-gym package (MIT): RLVE's environment source
as shipped, its base class in standard-library form, and the parameters of this difficulty.
"""

import json
import random
import sys
import types
{site}
from spade_env import parse_boxed

NAME = {name!r}
DIFFICULTY = {difficulty!r}
PARAMETERS = json.loads({parameters!r})
ATTEMPTS = {attempts!r}
PROBLEM_SEED = {problem_seed!r}  # None: each reset(seed) draws its own problem; else every play shares one
INSTRUCTION = {instruction!r}


def _install(module_name, source, package=False):
    module = types.ModuleType(module_name)
    if package:
        module.__path__ = []
    sys.modules[module_name] = module
    exec(compile(source, "<rlve " + module_name + ">", "exec"), module.__dict__)
    return module


_install("Gym", "", package=True)
_install("Gym.environments", "", package=True)
_install("Gym.environment", {base!r})
_install("Gym.environments." + {package!r}, "", package=True)
PROBLEM_CLASS = getattr(_install("Gym.environments." + {package!r} + ".environment", {source!r}), {class_name!r})


class RlveEnv:
    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.problem = None

    def reset(self, seed=None):
        rng = random.Random(seed if PROBLEM_SEED is None else PROBLEM_SEED)
        for _ in range(ATTEMPTS):
            parameter = rng.choice(PARAMETERS)
            problem = PROBLEM_CLASS()
            if problem.generator(seed=rng.randrange(2**31), parameter=parameter):
                self.problem = problem
                info = {{"rlve": NAME, "difficulty": DIFFICULTY}}
                return problem.prompt_generator() + "\\n\\n" + INSTRUCTION, info
        raise RuntimeError("RLVE generator failed %d times for %s at difficulty %d" % (ATTEMPTS, NAME, DIFFICULTY))

    def step(self, action):
        text = str(action)
        boxed = parse_boxed(text)
        if boxed is not None:
            text = text + "\\n<answer>" + boxed + "</answer>"
        try:
            correct = bool(self.problem.verifier(text)["accuracy"])
        except Exception:
            correct = False
        observation = "Correct!" if correct else "Incorrect."
        return observation, 1.0 if correct else 0.0, True, False, {{"correct": correct}}

    def solution(self):
        parameter = self.problem.parameter if self.problem is not None else {{}}
        return "\\\\boxed{{" + str(parameter.get("reference_answer", parameter.get("gold_answer", ""))) + "}}"
'''


def base_source() -> str:
    """The source text of :mod:`spade_core.envs.rlve_base` (what the jail gets as ``Gym.environment``), less
    its module docstring: a bundle is also the hint model's prompt, so it carries no prose it does not need."""
    text = (Path(__file__).parent / "rlve_base.py").read_text()
    return text.split('"""', 2)[2].lstrip() if text.startswith('"""') else text


def bundle(
    name: str, difficulty: int, params: list[dict[str, Any]] | None = None, problem_seed: int | None = None
) -> str:
    """The environment-contract module of RLVE environment ``name`` at ``difficulty`` (standard library only).

    ``params`` replaces the controller's parameter list (tests give a broken one to check error rows). With
    ``problem_seed``, every ``reset`` draws the same (parameter, seed) from it whatever its own seed: all plays
    of the module share one problem, the authors' ``--spade-fixed-env-same-problem`` (a GRPO group per
    problem, ``rlve_adapter.py:284-351``); without it, each play's seed draws its own problem.
    """
    env = catalog()[name]
    return _BUNDLE.format(
        name=name,
        difficulty=difficulty,
        parameters=json.dumps(parameters(name, difficulty) if params is None else params, sort_keys=True),
        attempts=GENERATOR_ATTEMPTS,
        problem_seed=problem_seed,
        instruction=ANSWER_INSTRUCTION,
        base=base_source(),
        site=f"\nsys.path.append({JAIL_SITE!r})\n" if env.foreign_imports else "",
        package=env.package,
        class_name=env.class_name,
        source=env.source,
    )


def env_id(name: str, difficulty: int) -> str:
    """The pool's ``env_id`` of RLVE environment ``name`` at ``difficulty``.

    >>> env_id("Sorting", 3), parse_env_id("rlve:Sorting@d3"), parse_env_id("3f2a9c")
    ('rlve:Sorting@d3', ('Sorting', 3), None)
    """
    return f"{PREFIX}{name}@d{difficulty}"


def parse_env_id(value: str) -> tuple[str, int] | None:
    """(name, difficulty) of an RLVE pool ``env_id``, or None for any other environment."""
    if not value.startswith(PREFIX) or "@d" not in value:
        return None
    name, _, level = value[len(PREFIX) :].rpartition("@d")
    return (name, int(level)) if level.isdigit() else None
