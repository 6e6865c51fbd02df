"""RLVE's ``Gym.environment`` for the jail: the base class its environments subclass, standard library only.

RLVE's own ``Gym/environment.py`` (PyPI ``rlve-gym`` 0.0.1, MIT) imports ``torch`` and ``numpy`` at module
level for one function, ``manual_seed``, which seeds ``random``, ``numpy``, ``torch`` and CUDA before each
generation. The jail runs the system Python with the standard library only, so a bundled RLVE environment
(:func:`spade_core.envs.rlve.bundle`) gets this module as ``Gym.environment`` instead: the same public
names (``VerifiableEnvironment``, ``timeout``, ``TimeoutException``) and the same behaviour for an
environment that uses only the standard library — the only kind that is bundled — since seeding ``random``
is then all ``manual_seed`` does that the environment can observe:

- ``generator(seed, parameter)``: seed, deep-copy the parameter, ``random.seed(seed)``, ``_generate()``;
  any exception means False (RLVE also stops a generation after ``timeout_second`` [10]; here the jail's
  per-call timeout does, and the play becomes a ``timeout`` row);
- ``processor(output)``: the text after the first ``Assistant:`` (if any), the *last*
  ``<answer>...</answer>``, handed to ``_process``;
- ``verifier(output)``: ``scorer(output)`` (an exception scores -1.0) as ``reward`` in [-1, 1],
  ``accuracy = score >= passing_reward_threshold - 1e-6``, ``format_score = score >= -1 + 1e-6``.

This file is source text for the jail (read by :func:`spade_core.envs.rlve.bundle`), also importable here
for tests. It must stay standard-library only and run on Python 3.11.

>>> class Echo(VerifiableEnvironment):
...     def _generate(self):
...         self.parameter["x"] = random.randint(0, 9)
...     def _prompt_generate(self):
...         return "say %d" % self.parameter["x"]
...     def _process(self, answer):
...         return answer
...     def scorer(self, output):
...         return 1.0 if self.processor(output) == str(self.parameter["x"]) else -1.0
>>> env = Echo()
>>> env.generator(seed=3, parameter={})
True
>>> answer = str(env.parameter["x"])
>>> env.verifier("<answer>no</answer> <answer>%s</answer>" % answer)["accuracy"]
1
>>> env.verifier("no tags")
{'reward': -1.0, 'accuracy': 0, 'format_score': 0}
"""

import copy
import functools
import random
import re
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeoutError


class TimeoutException(Exception):
    pass


def timeout(seconds):
    """Run the decorated function on a worker thread; raise :class:`TimeoutException` after ``seconds``."""

    def decorator(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            executor = ThreadPoolExecutor(max_workers=1)
            future = executor.submit(func, *args, **kwargs)
            try:
                return future.result(timeout=seconds)
            except FutureTimeoutError:
                raise TimeoutException(f"Function timed out after {seconds} seconds") from None
            finally:
                executor.shutdown(wait=False, cancel_futures=True)

        return wrapper

    return decorator


class VerifiableEnvironment(ABC):
    """One RLVE problem family: ``generator`` draws a problem, ``verifier`` scores an answer."""

    def __init__(self, answer_markers=None):
        self.seed = None
        self.parameter = None
        self.answer_markers = answer_markers or ("<answer>", "</answer>")
        self.passing_reward_threshold = 1.0

    def generator(self, seed, parameter=None, timeout_second=10):
        try:
            self.seed = seed
            self.parameter = copy.deepcopy(parameter) if parameter is not None else {}
            random.seed(seed)
            self._generate()
        except Exception:
            return False
        return self.parameter is not None

    @abstractmethod
    def _generate(self):
        pass

    def prompt_generator(self):
        if self.seed is None or self.parameter is None:
            raise RuntimeError("generator() should be called before prompt_generator()")
        return self._prompt_generate()

    @abstractmethod
    def _prompt_generate(self):
        pass

    def processor(self, output):
        if "Assistant:" in output:
            output = output.split("Assistant:", 1)[1]
        elif "<|im_start|>assistant" in output:
            output = output.split("<|im_start|>assistant", 1)[1]
        pattern = re.escape(self.answer_markers[0]) + r"(.*?)" + re.escape(self.answer_markers[1])
        matches = list(re.finditer(pattern, output, re.DOTALL))
        return self._process(matches[-1].group(1) if matches else None)

    @abstractmethod
    def _process(self, answer):
        pass

    @abstractmethod
    def scorer(self, output):
        pass

    def verifier(self, output):
        try:
            score = self.scorer(output)
        except Exception:
            score = -1.0
        if not -1.0 <= score <= 1.0:
            raise ValueError(f"score out of bounds: {score!r}")
        eps = 1e-6
        return dict(
            reward=score,
            accuracy=int(score >= self.passing_reward_threshold - eps),
            format_score=int(score >= -1.0 + eps),
        )

    def get_config(self):
        return dict(seed=self.seed, parameter=self.parameter, passing_reward_threshold=self.passing_reward_threshold)
