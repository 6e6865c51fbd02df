"""The store: Parquet tables, stage markers, checkpoints and the environment catalog (docs/DESIGN.md §4).

Layer 3 (above the basics and ``llm``): it knows the layout of what a run writes, not the order in which
the pipeline writes it.
"""
