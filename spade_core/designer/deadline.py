"""Wall-clock deadlines of the designer's model calls: the authors' ``asyncio.wait_for`` limits, as settings.

The authors bound a design attempt's reply at 300 s (``spade/core/corpus_orchestrator.py:118-130``), an LLM
validator's judgement at 120 s (lines 166-169) and a whole batch of designs at 900 s
(``spade/core/orchestrator.py:1459-1475``); a call past its limit fails (the attempt is retried, the judgement
rejects, the batch is lost). Here each is a setting (``designer.attempt_deadline_s``,
``validation.llm_validator_deadline_s``, ``designer.batch_deadline_s``; None: no deadline), and a call past
its deadline is data, never an exception: its completion carries an ``error`` that starts with
:data:`DEADLINE`, and the verdict it leads to has ``error_type`` ``deadline``.

How a deadline is kept depends on the generator (:func:`generate_within`). A server backend (``streams``:
vLLM, any OpenAI-compatible server) gets each request on a thread of its own and the call returns at the
deadline: a reply not back by then is abandoned (the server finishes it unseen; like the authors' executor
threads, it cannot be cancelled). An in-process generator answers a batch all at once, so the whole call
runs and every reply of a call that took longer than the deadline is late: the same replies are lost, the
call only returns later (abandoning it would leave it running on the same model as the next call).

A :class:`Clock` is a batch's budget: the time left bounds each call within it, and once it has passed the
batch's designs are lost (:mod:`spade_core.designer.retries`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from spade_core.llm.base import Completion, GenerationRequest, Generator, SamplingParams, seeded

DEADLINE = "deadline"  # the error_type of anything abandoned at a deadline (sandbox.outcome.ERROR_TYPES)


@dataclass
class Clock:
    """A batch's budget of ``seconds`` (None: unbounded), counted from the clock's creation.

    >>> Clock(None).left() is None, Clock(None).passed(), Clock(60).passed()
    (True, False, False)
    >>> Clock(0.0).passed()
    True
    """

    seconds: float | None
    started: float = field(default_factory=time.monotonic)

    def left(self) -> float | None:
        """Seconds left (may be negative), or None when unbounded."""
        return None if self.seconds is None else self.seconds - (time.monotonic() - self.started)

    def passed(self) -> bool:
        left = self.left()
        return left is not None and left <= 0

    def bound(self, seconds: float | None) -> float | None:
        """The deadline of a call within this batch: ``seconds`` or the time left, whichever is shorter.

        >>> Clock(None).bound(300.0), Clock(None).bound(None), Clock(100).bound(300.0) <= 100
        (300.0, None, True)
        """
        left = self.left()
        if left is None:
            return seconds
        return max(0.0, left) if seconds is None else max(0.0, min(seconds, left))


def start_clock(seconds: float | None, generator: Generator | None = None) -> Clock:
    """A batch's :class:`Clock`, started once ``generator`` is ready: a lazily leased generator loads its model
    first (a model's start-up is no part of the authors' limits, whose server is up)."""
    if seconds is not None and generator is not None:
        getattr(generator, "streams", False)  # a lease loads its model on the first attribute it forwards
    return Clock(seconds)


def call_deadline(attempt: float | None, clock: Clock | None) -> tuple[float | None, str]:
    """The deadline of one design call and the setting that sets it: ``designer.attempt_deadline_s``, or the
    batch's time left (``designer.batch_deadline_s``) when that is shorter.

    >>> call_deadline(300.0, None), call_deadline(None, Clock(None))
    ((300.0, 'designer.attempt_deadline_s'), (None, 'designer.attempt_deadline_s'))
    >>> call_deadline(300.0, Clock(10.0))[1]
    'designer.batch_deadline_s'
    """
    bound = clock.bound(attempt) if clock is not None else attempt
    if bound is not None and (attempt is None or bound < attempt):
        return bound, "designer.batch_deadline_s"
    return bound, "designer.attempt_deadline_s"


def late(seconds: float, what: str) -> Completion:
    """The completion of a request abandoned at its deadline."""
    return Completion(text="", finish_reason="error", error=f"{DEADLINE}: no reply within {seconds:g} s ({what})")


def is_late(completion: Completion) -> bool:
    """Whether a completion is one abandoned at its deadline (:func:`late`).

    >>> is_late(late(1, "x")), is_late(Completion("hi")), is_late(Completion("", error="HTTP 500"))
    (True, False, False)
    """
    return completion.error is not None and completion.error.startswith(f"{DEADLINE}:")


def generate_within(
    generator: Generator,
    requests: list[GenerationRequest],
    params: SamplingParams,
    seconds: float | None,
    what: str = "deadline",
) -> list[Completion]:
    """``generator.generate(requests, params)``, each reply within ``seconds`` (None: no deadline) or replaced by
    :func:`late` (``what`` names the setting, for the message). Requests keep the seeds a batched call would
    give them, so a reply that comes back in time is the one the batch would have returned."""
    if seconds is None or not requests:
        return generator.generate(requests, params)
    if seconds <= 0:
        return [late(seconds, what) for _ in requests]
    requests = seeded(requests, params)
    if not getattr(generator, "streams", False):
        started = time.monotonic()
        replies = generator.generate(requests, params)
        if time.monotonic() - started > seconds:
            return [late(seconds, what) for _ in requests]
        return replies
    results: list[Completion | None] = [None] * len(requests)

    def one(i: int) -> None:
        try:
            results[i] = generator.generate([requests[i]], params)[0]
        except Exception as exc:  # a generator never raises for one request; if one does, that reply failed
            results[i] = Completion(text="", finish_reason="error", error=f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=one, args=(i,), daemon=True, name=f"deadline-{i}") for i in range(len(requests))]
    end = time.monotonic() + seconds
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, end - time.monotonic()))
    return [r if r is not None and not threads[i].is_alive() else late(seconds, what) for i, r in enumerate(results)]
