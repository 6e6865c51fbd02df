"""In-jail host: loads ONE generated environment and serves it over a framed protocol.

Runs inside nsjail under the system ``python3``; standard library only; imports nothing of the project
except the sibling ``spade_env`` helpers that generated environments may import themselves.

Protocol: every message is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON.
Requests arrive on a private duplicate of fd 0; replies leave on a private duplicate of fd 1. Before any
generated code runs, fd 0 is pointed at /dev/null and fd 1 at stderr, and ``sys.stdout`` is replaced by a
capped buffer, so ``print``, ``sys.stdout.write`` and ``os.write(1, ...)`` from the environment can never
produce or corrupt a protocol frame. The first frame is ``{"ready": true}``.

Requests: ``load`` (source, max_turns, own_max_turns, contract), ``reset`` (seed), ``step`` (action),
``solution``, ``close``. ``contract`` is ``ours`` (a ``solution`` method, reset returns a pair, 0/1 taken as
flags, no bool reward) or ``authors`` (their smoke test's types, spade/core/envs/synthetic_game_env.py:262-335:
no ``solution`` needed, reset may return the observation alone, flags must be real bools, any int or float
reward); both refuse a reward that is not finite or beyond +-REWARD_LIMIT. A load for play (``at_play``) under
``authors`` holds ``step`` to their game wrapper's conversions instead (synthetic_game_env.py:404-414: the
observation through ``str``, the reward through ``float``, the flags through ``bool``, info that is no dict
dropped; a conversion that raises is a raising step; strict types are their load-time smoke test's only), and
with ``reset_placeholder`` a ``reset`` that raises gives their placeholder observation
(synthetic_game_env.py:336-359) instead of an error.
Replies: ``{"ok": true, ...}`` or ``{"ok": false, "error_type": ..., "message": ...}``; each carries the
environment's captured ``stdout`` (truncated).
"""

import io
import json
import math
import os
import resource
import signal
import struct
import sys
import traceback

MAX_CAPTURE = 2000
MAX_PRINTED = 1 << 20  # characters an environment may print in one call; beyond it the call is output_limit
# The widest reward the host passes on: the authors' smoke-test range (spade_core.envs.validate.SMOKE_REWARD_RANGE).
REWARD_LIMIT = 10.0
MODULE_NAME = "spade_generated_env"
# What the authors' game wrapper returns from a reset that raised (synthetic_game_env.py:356-359).
RESET_PLACEHOLDER = "Error during reset. Starting new game."

# Private references taken before generated code runs, so it cannot swap them out from under us by
# patching modules (a deliberate in-process forgery is out of scope: see the sandbox threat model).
_dumps, _loads, _pack, _unpack = json.dumps, json.loads, struct.pack, struct.unpack
_os_read, _os_write = os.read, os.write


class ContractError(Exception):
    """The environment returned something the contract does not allow."""


class CpuLimitExceeded(BaseException):
    """SIGXCPU: the jail's CPU-seconds budget is spent (raised in the main thread by the handler)."""


def _on_sigxcpu(signum, frame):
    raise CpuLimitExceeded()


def _arm_cpu_limit():
    """Lower the soft CPU limit one second below the hard one, so SIGXCPU (a reportable timeout)
    arrives before the kernel's SIGKILL at the hard limit."""
    try:
        hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        if hard != resource.RLIM_INFINITY and hard >= 2:
            resource.setrlimit(resource.RLIMIT_CPU, (hard - 1, hard))
        signal.signal(signal.SIGXCPU, _on_sigxcpu)
    except (ValueError, OSError):
        pass


class OutputLimitExceeded(BaseException):
    """The environment printed over :data:`MAX_PRINTED` characters in one call (a BaseException: an
    environment's ``except Exception`` does not swallow it)."""


class _CappedStdout(io.TextIOBase):
    def __init__(self):
        self.parts, self.size, self.dropped, self.exceeded = [], 0, 0, False

    def writable(self):
        return True

    def write(self, text):
        text = str(text)
        room = MAX_CAPTURE - self.size
        if room > 0:
            self.parts.append(text[:room])
            self.size += min(len(text), room)
        self.dropped += max(0, len(text) - max(room, 0))
        if self.size + self.dropped > MAX_PRINTED:
            self.exceeded = True  # kept even if the environment catches the exception: the call fails
            raise OutputLimitExceeded()
        return len(text)

    def take(self):
        out = "".join(self.parts)
        if self.dropped:
            out += "...[%d chars dropped]" % self.dropped
        self.parts, self.size, self.dropped, self.exceeded = [], 0, 0, False
        return out


def _short(value, limit=200):
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _read_exact(fd, n):
    buf = b""
    while len(buf) < n:
        chunk = _os_read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _json_safe(info):
    try:
        _dumps(info, allow_nan=False)
        return info
    except (TypeError, ValueError, RecursionError):
        return {"_unserialisable_info": _short(info, 500)}


def check_obs(value, where):
    if not isinstance(value, str):
        raise ContractError(
            "%s returned an observation of type %s (%s), expected str" % (where, type(value).__name__, _short(value))
        )
    return value


def check_info(value, where):
    if not isinstance(value, dict):
        raise ContractError(
            "%s returned info of type %s (%s), expected dict" % (where, type(value).__name__, _short(value))
        )
    return _json_safe(value)


def check_flag(value, name, strict=False):
    if isinstance(value, bool):
        return value
    if not strict and isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ContractError("step returned %s=%s (%s), expected a bool" % (name, _short(value), type(value).__name__))


def check_reward(value, allow_bool=False):
    """A finite number within +-REWARD_LIMIT, as a float.

    The contract asks for rewards in [-1, 1] and the full validator checks that; the host is wider, so that
    ``validation.mode: smoke`` keeps the authors' [-10, 10] and the engine's clamp of the return to [-1, 1]
    is what decides an out-of-range reward at play time (the authors' semantics).
    """
    if (isinstance(value, bool) and not allow_bool) or not isinstance(value, (int, float)):
        raise ContractError(
            "step returned reward %s of type %s, expected a number in [-1, 1]" % (_short(value), type(value).__name__)
        )
    reward = float(value)
    if not math.isfinite(reward) or not -REWARD_LIMIT <= reward <= REWARD_LIMIT:
        raise ContractError(
            "step returned reward %r, expected a finite number in [-1, 1] (the jail refuses beyond +-%g)"
            % (reward, REWARD_LIMIT)
        )
    return reward


def converted_step(out):
    """A ``step`` result as the authors' game wrapper converts it at play (synthetic_game_env.py:404-414): None
    becomes the wrapper's default, everything else goes through ``str`` / ``float`` / ``bool`` (which may
    raise: a raising step); the reward must still be finite, as JSON carries no NaN (the engine clamps the
    return to [-1, 1] anyway)."""
    out = check_tuple(out, 5, "step(action)")
    obs, reward, terminated, truncated, info = out
    reward = float(reward) if reward is not None else 0.0
    if not math.isfinite(reward):
        raise ContractError("step returned reward %r, expected a finite number" % (reward,))
    return {
        "ok": True,
        "obs": str(obs) if obs is not None else "No observation",
        "reward": reward,
        "terminated": bool(terminated) if terminated is not None else False,
        "truncated": bool(truncated) if truncated is not None else False,
        "info": _json_safe(info) if isinstance(info, dict) else {},
    }


def check_tuple(value, length, where):
    if not isinstance(value, (tuple, list)) or len(value) != length:
        got = (
            "a %s of length %d" % (type(value).__name__, len(value))
            if isinstance(value, (tuple, list))
            else "a %s (%s)" % (type(value).__name__, _short(value))
        )
        raise ContractError("%s returned %s, expected a tuple of %d" % (where, got, length))
    return value


def find_env_class(namespace):
    classes = [
        v
        for v in namespace.values()
        if isinstance(v, type)
        and v.__module__ == MODULE_NAME
        and callable(getattr(v, "reset", None))
        and callable(getattr(v, "step", None))
    ]
    if len(classes) != 1:
        names = ", ".join(c.__name__ for c in classes) or "none"
        raise ContractError(
            "expected exactly one environment class (with reset and step), found %d: %s" % (len(classes), names)
        )
    return classes[0]


def turn_limit(env):
    """The environment's own ``max_turns`` when it is a positive int, else None."""
    turns = getattr(env, "max_turns", None)
    return turns if isinstance(turns, int) and not isinstance(turns, bool) and turns > 0 else None


def build_env(cls, cap):
    """``cls`` built with its own default ``max_turns`` (or with ``cap`` when it needs the argument), its
    ``max_turns`` then capped at ``cap``; one without a usable ``max_turns`` gets ``cap``."""
    try:
        env = cls()
    except TypeError:
        return cls(max_turns=cap)
    designed = turn_limit(env)
    if designed is not None or hasattr(env, "max_turns"):
        env.max_turns = min(designed or cap, cap)
    return env


class Host:
    def __init__(self):
        self.env = None
        self.authors = False  # the authors' contract (see the module doc)
        self.convert = False  # authors, at play: step results converted as their wrapper does
        self.reset_placeholder = False  # a reset that raises gives the authors' placeholder observation

    def load(self, source, max_turns=12, own_max_turns=False, contract="ours", at_play=False, reset_placeholder=False):
        """Load the one environment class of ``source`` and build it with ``max_turns``; with
        ``own_max_turns`` it is built with its own default instead and keeps its own ``max_turns``, capped at
        ``max_turns`` (the authors' ``respect_game_max_turns``, spade/core/envs/synthetic_game_env.py:226-246)."""
        import spade_env  # the jail's runtime module: on sys.path only inside the jail

        try:
            code = compile(source, "<environment>", "exec")
        except (SyntaxError, ValueError) as exc:
            return {"ok": False, "error_type": "syntax_error", "message": "%s: %s" % (type(exc).__name__, exc)}
        module = type(sys)(MODULE_NAME)
        sys.modules[MODULE_NAME] = module
        exec(code, module.__dict__)
        cls = find_env_class(module.__dict__)
        self.authors = contract == "authors"
        self.convert = self.authors and at_play
        self.reset_placeholder = reset_placeholder
        if not self.authors and not callable(getattr(cls, "solution", None)):
            raise ContractError("environment class %s has no solution() method" % cls.__name__)
        self.env = build_env(cls, max_turns) if own_max_turns else cls(max_turns=max_turns)
        tools = spade_env.tool_schemas(cls)
        kind = "tool" if tools or isinstance(self.env, spade_env.ToolEnv) else "game"
        turns = turn_limit(self.env) or max_turns
        return {"ok": True, "class_name": cls.__name__, "kind": kind, "tools": tools, "max_turns": turns}

    def _need_env(self):
        if self.env is None:
            raise ContractError("no environment loaded")
        return self.env

    def reset(self, seed=None):
        env = self._need_env()
        try:
            out = env.reset(seed=seed)
        except Exception:
            if not self.reset_placeholder:
                raise
            out = (RESET_PLACEHOLDER, {})
        if self.authors and isinstance(out, str):
            out = (out, {})
        out = check_tuple(out, 2, "reset(seed)")
        return {"ok": True, "obs": check_obs(out[0], "reset"), "info": check_info(out[1], "reset")}

    def step(self, action=""):
        if self.convert:
            return converted_step(self._need_env().step(action))
        out = check_tuple(self._need_env().step(action), 5, "step(action)")
        return {
            "ok": True,
            "obs": check_obs(out[0], "step"),
            "reward": check_reward(out[1], allow_bool=self.authors),
            "terminated": check_flag(out[2], "terminated", strict=self.authors),
            "truncated": check_flag(out[3], "truncated", strict=self.authors),
            "info": check_info(out[4], "step"),
        }

    def call_tool(self, name, arguments):
        """One tool call outside ``step`` (the native protocol): the environment's ``execute_tool``, or for an
        environment without one, its ``tool_<name>`` method run as :func:`spade_env.run_tool` runs it."""
        import spade_env  # the jail's runtime module: on sys.path only inside the jail

        env = self._need_env()
        execute = getattr(env, "execute_tool", None)
        out = execute(name, arguments) if callable(execute) else spade_env.run_tool(env, name, arguments)[0]
        return {"ok": True, "output": check_obs(out, "execute_tool(%s)" % _short(name))}

    def criteria_at_reset(self, seed=None):
        """``reset(seed)``, then each instruction criterion (``env.criteria``, :class:`spade_env.InstructionEnv`)
        evaluated on that state: per criterion None, or the error it raised (the authors' reset gate)."""
        env = self._need_env()
        self.reset(seed)
        errors = []
        for criterion in list(getattr(env, "criteria", None) or []):
            try:
                criterion(env)
                errors.append(None)
            except Exception as exc:
                errors.append("%s: %s" % (type(exc).__name__, _short(str(exc), 200)))
        return {"ok": True, "errors": errors}

    def solution(self):
        value = self._need_env().solution()
        if not isinstance(value, str):
            raise ContractError("solution() returned %s (%s), expected str" % (type(value).__name__, _short(value)))
        return {"ok": True, "solution": value}


def handle(host, request):
    op = request.get("op")
    try:
        if op == "load":
            return host.load(
                request.get("source", ""),
                int(request.get("max_turns", 12)),
                bool(request.get("own_max_turns")),
                str(request.get("contract", "ours")),
                bool(request.get("at_play")),
                bool(request.get("reset_placeholder")),
            )
        if op == "reset":
            return host.reset(request.get("seed"))
        if op == "step":
            return host.step(request.get("action", ""))
        if op == "criteria_at_reset":
            return host.criteria_at_reset(request.get("seed"))
        if op == "call_tool":
            return host.call_tool(request.get("name"), request.get("arguments"))
        if op == "solution":
            return host.solution()
        return {"ok": False, "error_type": "jail_error", "message": "unknown op %r" % (op,)}
    except ContractError as exc:
        return {"ok": False, "error_type": "contract_error", "message": str(exc)}
    except MemoryError:
        return {"ok": False, "error_type": "memory", "message": "MemoryError in %s" % op}
    except CpuLimitExceeded:
        return {"ok": False, "error_type": "timeout", "message": "%s: the jail's CPU-seconds limit is spent" % op}
    except OutputLimitExceeded:
        return _printed_too_much(op)
    except BaseException as exc:
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
        return {
            "ok": False,
            "error_type": "exception",
            "message": "%s in %s: %s" % (type(exc).__name__, op, _short(str(exc), 300)),
            "traceback": "".join(tb[-3:])[-1500:],
        }


def _printed_too_much(op):
    return {"ok": False, "error_type": "output_limit", "message": "%s: printed over %d characters" % (op, MAX_PRINTED)}


def main():
    max_bytes = int(sys.argv[1]) if len(sys.argv) > 1 else 65536
    proto_in, proto_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    capture = _CappedStdout()
    sys.stdout = capture
    sys.stdin = io.StringIO("")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    _arm_cpu_limit()
    host = Host()

    def send(message):
        if capture.exceeded and message.get("ok"):  # the environment caught OutputLimitExceeded and went on
            message = _printed_too_much("call")
        message["stdout"] = capture.take()
        try:
            # ensure_ascii=False so that "replace" really replaces lone surrogates from the environment
            payload = _dumps(message, allow_nan=False, ensure_ascii=False).encode("utf-8", "replace")
        except MemoryError:
            payload = _dumps(
                {"ok": False, "error_type": "memory", "message": "MemoryError serialising the reply"}
            ).encode()
        except (TypeError, ValueError):
            payload = _dumps(
                {"ok": False, "error_type": "contract_error", "message": "reply is not JSON-serialisable"}
            ).encode()
        if len(payload) > max_bytes:
            payload = _dumps(
                {
                    "ok": False,
                    "error_type": "output_limit",
                    "message": "reply of %d bytes exceeds the %d-byte limit" % (len(payload), max_bytes),
                }
            ).encode()
        _os_write(proto_out, _pack(">I", len(payload)) + payload)

    send({"ready": True})
    while True:
        header = _read_exact(proto_in, 4)
        if header is None:
            return
        body = _read_exact(proto_in, _unpack(">I", header)[0])
        if body is None:
            return
        request = _loads(body.decode("utf-8"))
        if request.get("op") == "close":
            try:
                if host.env is not None and callable(getattr(host.env, "close", None)):
                    host.env.close()
            except BaseException:
                pass
            send({"ok": True})
            return
        send(handle(host, request))


if __name__ == "__main__":
    main()
