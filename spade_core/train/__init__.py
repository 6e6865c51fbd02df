"""One GRPO optimizer step of both roles: the batch from the store, TRL's trainer through its seams, and
the ``accelerate launch`` subprocess that runs it (docs/DESIGN.md §7).

Importing this package imports nothing heavy; ``spade_core.train.step`` is the subprocess entry point.
"""
