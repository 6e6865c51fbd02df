"""SPADE's method and its pipeline (docs/DESIGN.md §2: the layers). Importing it changes nothing in the process:
the entry points (the ``spade`` command, the flows, the trainer's launch) make OpenMP waits passive
(:func:`spade_core.threads.passive_waits`)."""
