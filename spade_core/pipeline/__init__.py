"""The pipeline of one generation: stage declarations, their registry, markers, and the local runner.

``spade_core.pipeline.registry.STAGES`` is the single list of stages; ``stage.execute`` the single resume
rule; ``markers`` the single authority on what is complete (docs/DESIGN.md §10).
"""
