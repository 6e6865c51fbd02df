"""The order of work: stage declarations and their registry, the runner of a generation and of a run of
generations, the stage context, model leases, status and the run's bound config.

``spade_core.pipeline.registry.STAGES`` is the single list of stages (with what each reads and writes);
``runner`` the single schedule; ``stage.execute`` the single resume rule, over the markers of
:mod:`spade_core.store.markers` (docs/DESIGN.md §10).
"""
