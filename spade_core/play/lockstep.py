"""The lockstep run mode of :mod:`spade_core.play.rollout`, for an in-process model (transformers).

Each turn every live episode's next prompt goes to the generator in ONE batched call; an episode that ends
leaves the batch; the environments then step in parallel (one long-lived jail per episode). Before each turn
a play that failed with retries left is replaced by a fresh one (:meth:`~spade_core.play.player.Player.reopen`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sandbox.session import run_parallel
from spade_core.play.episode import Episode, EpisodeSpec
from spade_core.play.player import Player

MAX_STEP_WORKERS = 32


def run_lockstep(
    player: Player, specs: Sequence[EpisodeSpec], on_turn: Callable[[int, int], None] | None
) -> list[Episode]:
    """Each turn, every live episode's prompt in ONE batched call; then every environment steps."""
    episodes: list[Episode] = []
    try:
        episodes = run_parallel(player.open, specs, player.jail_workers)
        while True:
            retry_broken(player, episodes)
            live = [e for e in episodes if not e.done]
            if not live:
                break
            completions = player.generator.generate([player.request(e) for e in live], player.sampling)
            player.stats.generate_calls += 1
            stepping = [t for e, c in zip(live, completions, strict=True) if (t := player.take_reply(e, c))]
            results = run_parallel(player.protocol.play, stepping, min(MAX_STEP_WORKERS, max(1, len(stepping))))
            for turn, result in zip(stepping, results, strict=True):
                player.protocol.record(turn, result)
            for episode in live:
                player.check_deadline(episode)
            player.release([e for e in live if e.done])
            player.count_prompts(completions)
            player.stats.turns += 1
            if on_turn is not None:
                on_turn(sum(e.done for e in episodes), len(episodes))
    finally:
        player.release(episodes)
        run_parallel(lambda e: e.session.close(), episodes, player.jail_workers)
    return episodes


def retry_broken(player: Player, episodes: list[Episode]) -> None:
    """Replace, in place, every episode that failed with retries left by a fresh play of the same spec (a new
    jail, the same seed); the failed one's jail is closed first."""
    redo = [i for i, e in enumerate(episodes) if player.retries_left(e)]
    if not redo:
        return
    player.release([episodes[i] for i in redo])
    run_parallel(lambda i: episodes[i].session.close(), redo, player.jail_workers)
    fresh = run_parallel(lambda i: player.reopen(episodes[i]), redo, player.jail_workers)
    for i, episode in zip(redo, fresh, strict=True):
        episodes[i] = episode
