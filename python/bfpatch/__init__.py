"""bfpatch from Python.

Actors: WeightBuffer maps the weight buffer a bfpatch-shim commits into,
zero-copy (numpy or torch views, read-only unless asked otherwise), with
the safe-point handshake.
"""
from .buffer import COMMITTING, READY, RESYNC, WeightBuffer

__version__ = "0.2.0"
__all__ = ["WeightBuffer", "READY", "COMMITTING", "RESYNC"]
