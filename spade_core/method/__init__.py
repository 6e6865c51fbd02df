"""SPADE's formulas: the designer's reward (regret, learning potential, blend), scores and advantages.

Pure functions over frames and numbers (docs/method.md); no model, no jail, no pipeline.
"""
