"""bfpatch from Python.

Actors: WeightBuffer maps the weight buffer a bfpatch-shim commits into,
zero-copy (numpy or torch views, read-only unless asked otherwise), with
the safe-point handshake, and reads the change lists a shim keeps
(apply_changes: a version into the engine's own tensors, one scatter per
tensor).

Trainers: Publisher commits versions from memory (numpy arrays, torch CPU
tensors) into a weight buffer that `bfpatch publish --buffer PATH` sends
to the actors; it needs libbfpatch_wbuf.so from bfpatch's C build.

docs/INTEGRATION.md in the source tree shows both in an RL loop.
"""
from .buffer import COMMITTING, READY, RESYNC, WeightBuffer
from .changes import ChangeList, ChangesUnavailable
from .publisher import LayoutError, Publisher

__version__ = "0.2.0"
__all__ = ["WeightBuffer", "Publisher", "LayoutError", "READY", "COMMITTING", "RESYNC",
           "ChangeList", "ChangesUnavailable"]
