"""One module per stage of a generation; :mod:`spade_core.pipeline.registry` lists them in order."""
