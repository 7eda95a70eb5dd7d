"""bfpatch_buffer: the actor's weight-buffer module under its first name,
kept so that code which puts host_shim/python on sys.path goes on working.
The package is `bfpatch` (python/ in the source tree; README says how to
install it): `from bfpatch import WeightBuffer`. Beside its source tree
this takes the tree's package, else the installed one.
"""
import os
import sys

_TREE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
if os.path.isfile(os.path.join(_TREE, "bfpatch", "__init__.py")) and \
        os.path.realpath(_TREE) not in map(os.path.realpath, sys.path):
    sys.path.insert(0, os.path.realpath(_TREE))

from bfpatch.buffer import (COMMITTING, MAGIC, READY, RESYNC,  # noqa: E402,F401
                            WeightBuffer)
