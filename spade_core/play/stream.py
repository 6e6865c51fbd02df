"""The streaming run mode of :mod:`spade_core.play.rollout`, for a server (vLLM, any OpenAI-compatible one:
a generator that ``streams``).

There is no batch barrier: every episode runs on its own worker, up to ``rollout.max_in_flight`` at once, and
sends its next request as soon as its jail has answered; the server batches whatever is in flight. Jails
open ``jail_workers`` at a time. A play that failed with retries left is replaced by a fresh one on the same
worker (:meth:`~spade_core.play.player.Player.reopen`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from spade_core.play.episode import Episode, EpisodeSpec
from spade_core.play.player import Player


def run_stream(
    player: Player, specs: Sequence[EpisodeSpec], on_turn: Callable[[int, int], None] | None
) -> list[Episode]:
    """Every episode on its own worker: a reply goes to its jail and the episode's next request goes out while
    the others are still decoding."""
    episodes: list[Episode | None] = [None] * len(specs)
    opening = threading.Semaphore(player.jail_workers)
    lock = threading.Lock()
    finished = [0]

    def open_(spec: EpisodeSpec, attempt: int) -> Episode:
        with opening:
            return player.open(spec, attempt)

    def play(index: int) -> None:
        episode = episodes[index] = open_(specs[index], 0)
        try:
            while True:
                if player.retries_left(episode):
                    episode.session.close()
                    with opening:
                        episode = episodes[index] = player.reopen(episode)
                    continue
                if episode.done:
                    break
                completion = player.generator.generate([player.request(episode)], player.sampling)[0]
                turn = player.take_reply(episode, completion)
                if turn is not None:
                    player.protocol.record(turn, player.protocol.play(turn))
                player.check_deadline(episode)
                with lock:
                    player.stats.generate_calls += 1
                    player.count_prompts([completion])
        finally:
            episode.session.close()
        with lock:
            finished[0] += 1
            if on_turn is not None:
                on_turn(finished[0], len(specs))

    workers = max(1, min(player.cfg.max_in_flight, len(specs)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(play, range(len(specs))))
    player.stats.turns += max((len(e.rewards) for e in episodes if e is not None), default=0)
    return [e for e in episodes if e is not None]
