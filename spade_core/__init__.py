"""SPADE's method and its pipeline; importing it makes OpenMP waits passive (:mod:`spade_core.threads`)."""

from spade_core.threads import passive_waits

passive_waits()
