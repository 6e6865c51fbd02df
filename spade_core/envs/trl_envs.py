"""An export's environments for TRL's ``GRPOTrainer(environment_factory=...)``, each episode in the jail.

TRL 1.16's environment interface (``trl/trainer/grpo_trainer.py``, the ``environment_factory`` argument): a
factory returns an object with a ``reset(**row)`` that may return text appended to the prompt, public methods
that the model calls as tools (type hints and a Google-style docstring make their schema), and an optional
``get_reward()`` that makes the environment own the reward of the rollout. A ``dict`` of factories selects the
environment per example by the dataset's ``environment`` column. :class:`ExportEnvironments` gives exactly that:
one factory per exported environment (named by its ``env_id``), and :meth:`ExportEnvironments.dataset`, rows of
a prompt, the ``environment`` and the episode's ``seed``.

How a SPADE environment maps onto the interface (the simplifications, and why):

- a game's turn is one tool, ``act(action)``: the action is the command the observation asks for
  (``\\boxed{...}``); a tool-use environment's turn is ``call_tool(name, arguments)`` or ``answer(answer)``, which
  become the contract's ``<tool_call>{...}</tool_call>`` and ``<answer>...</answer>`` texts. The two kinds are
  two classes because TRL exposes every public method of a class to the model;
- the reward is the contract's episode return (clamp(last reward, -1, 1) if the episode terminated, else 0): TRL
  scores a rollout once, at its end, so the per-step rewards are not seen by it;
- a call the environment breaks in the jail ends the episode with return 0 and says so to the model, and a
  reset it breaks twice gives an episode with nothing to play (the pipeline would replay such a play and leave
  it out of training; TRL has no such notion, and a raised error would stop its training);
- the jail opens at the first ``reset`` (TRL builds one probe instance per environment at start, and pools the
  instances afterwards), and :meth:`ExportEnvironments.close` closes every jail the factories opened.

A tokenizer whose chat template cannot render tool calls (the embedded SmolLM2's) fails TRL's check:
:func:`with_tool_template` gives a ChatML tokenizer TRL's own Qwen2.5 template, whose tool-call format TRL
parses.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from spade_core.envs.export import read_export
from spade_core.envs.gym import JailedEnv, JailedEnvError

SYSTEM_PROMPT = "You play a text environment through its tools, one call per turn."
GAME_NOTE = "\n\nPlay each turn by calling the `act` tool with your command."
TOOL_NOTE = (
    "\n\nHere the environment's tools are reached through `call_tool` (a tool's name and its arguments), and you "
    "finish by calling `answer`."
)


class _JailedEpisode:
    """What both kinds share: the jail, the seed, the episode's state and its return."""

    note = ""

    def __init__(self, code: str, *, max_turns: int = 12, call_timeout_s: float = 5.0) -> None:
        self._code = code
        self._max_turns = max_turns
        self._call_timeout_s = call_timeout_s
        self._env: JailedEnv | None = None
        self._reward = 0.0
        self._terminated = False
        self._over = True

    def reset(self, **row: Any) -> str:
        """Start an episode from the row's ``seed`` (None: one the wrapper draws); returns the observation. A
        reset the environment breaks is tried once more in a fresh jail; if that breaks too, the episode is
        over before it starts (return 0) and the text says so."""
        seed = row.get("seed")
        self._reward, self._terminated, self._over = 0.0, False, True
        failure = ""
        for _ in range(2):
            if self._env is None:
                self._env = JailedEnv(code=self._code, max_turns=self._max_turns, call_timeout_s=self._call_timeout_s)
            try:
                observation, _ = self._env.reset(seed=int(seed) if seed is not None else None)
            except JailedEnvError as exc:
                self._close()
                failure = exc.error_type
                continue
            self._over = False
            return observation + self.note
        return f"The environment failed to start ({failure}); there is nothing to play."

    def get_reward(self) -> float:
        """The episode's return: clamp(last reward, -1, 1) if it terminated, else 0."""
        return max(-1.0, min(1.0, self._reward)) if self._terminated else 0.0

    def _step(self, action: str) -> str:
        if self._env is None or self._over:
            return "The episode is over."
        try:
            observation, reward, terminated, truncated, _ = self._env.step(action)
        except JailedEnvError as exc:
            self._reward, self._terminated, self._over = 0.0, False, True
            self._close()  # the next reset starts a fresh jail
            return f"The environment failed ({exc.error_type}); the episode is over."
        self._reward, self._terminated = reward, terminated
        self._over = terminated or truncated
        return observation

    def _close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


class JailedGame(_JailedEpisode):
    """A game environment of an export, for TRL: one tool, ``act``."""

    note = GAME_NOTE

    def act(self, action: str) -> str:
        """Play one turn of the game.

        Args:
            action: Your command for this turn, in the form the game asks for, e.g. \\boxed{42}.

        Returns:
            The game's reply.
        """
        return self._step(action)


class JailedToolUse(_JailedEpisode):
    """A tool-use environment of an export, for TRL: ``call_tool`` and ``answer``."""

    note = TOOL_NOTE

    def call_tool(self, name: str, arguments: dict) -> str:
        """Call one of the environment's tools.

        Args:
            name: The tool's name, as the task lists it.
            arguments: The tool's arguments by name.

        Returns:
            The tool's result.
        """
        return self._step(f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>")

    def answer(self, answer: str) -> str:
        """Give your final answer to the task.

        Args:
            answer: The answer only, e.g. R-312.

        Returns:
            Whether it was right.
        """
        return self._step(f"<answer>{answer}</answer>")


class ExportEnvironments:
    """The environments of an export as TRL environment factories, one per ``env_id``; closes their jails.

    Example::

        with ExportEnvironments("DIR") as envs:
            trainer = GRPOTrainer(model, args=config, train_dataset=envs.dataset(seeds=[0, 1]),
                                  environment_factory=envs.factories, processing_class=tokenizer)
            trainer.train()
    """

    def __init__(
        self,
        directory: str,
        *,
        env_ids: list[str] | None = None,
        max_turns: int = 12,
        call_timeout_s: float = 5.0,
        endpoint_url: str | None = None,
    ) -> None:
        frame = read_export(directory, endpoint_url=endpoint_url)
        if env_ids is not None:
            unknown = sorted(set(env_ids) - set(frame["env_id"]))
            if unknown:
                raise KeyError(f"not in the export {directory!r}: {', '.join(unknown)}")
            frame = frame[frame["env_id"].isin(env_ids)]
        self.rows = frame.reset_index(drop=True)
        self._opened: list[_JailedEpisode] = []
        self.factories: dict[str, Callable[[], _JailedEpisode]] = {
            env_id: self._factory(code, kind, max_turns, call_timeout_s)
            for env_id, code, kind in zip(self.rows["env_id"], self.rows["code"], self.rows["kind"], strict=True)
        }

    def _factory(self, code: str, kind: str, max_turns: int, call_timeout_s: float) -> Callable[[], _JailedEpisode]:
        cls = JailedToolUse if kind == "tool" else JailedGame

        def make() -> _JailedEpisode:
            episode = cls(code, max_turns=max_turns, call_timeout_s=call_timeout_s)
            self._opened.append(episode)
            return episode

        return make

    def dataset(self, seeds: list[int], system_prompt: str = SYSTEM_PROMPT) -> Any:
        """A ``datasets.Dataset`` of one row per (environment, seed): a conversational ``prompt`` (the
        environment's observation is appended to it by ``reset``), the ``environment`` and the ``seed``."""
        import datasets  # heavy; only the TRL path needs it

        rows = [
            {"prompt": [{"role": "system", "content": system_prompt}, {"role": "user", "content": ""}]}
            | {"environment": env_id, "seed": seed}
            for env_id in self.factories
            for seed in seeds
        ]
        return datasets.Dataset.from_list(rows)

    def close(self) -> None:
        """Close every jail a factory's environments opened."""
        for episode in self._opened:
            episode._close()
        self._opened.clear()

    def __enter__(self) -> ExportEnvironments:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def with_tool_template(tokenizer: Any) -> Any:
    """``tokenizer``, given TRL's Qwen2.5 chat template when its own cannot render tool calls and it speaks
    ChatML (``<|im_start|>``, as SmolLM2 does): the template TRL's tool-call parsing knows. Any other tokenizer
    is returned as it is (TRL then says what it lacks)."""
    from trl.chat_template_utils import qwen2_5_chat_template, supports_tool_calling  # heavy: trl

    if not supports_tool_calling(tokenizer) and "<|im_start|>" in tokenizer.get_vocab():
        tokenizer.chat_template = qwen2_5_chat_template
    return tokenizer
