"""SPADE's bundled files, installed as the package ``spade_data``: config presets (``configs/``), the seed
environment library (``seed_envs/``) and accelerate launch configs (``accelerate/``).

Nothing here is imported; ``spade_core.resources`` finds the files with ``importlib.resources``.
"""
