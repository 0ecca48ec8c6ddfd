"""The pickle-free .pt2 format: ``save`` and ``load`` (see ``schema`` for the layout)."""
from .pt2 import StructureOnlyProgram, load, save
from .schema import CHANGELOG, FORMAT_VERSION

__all__ = ["save", "load", "StructureOnlyProgram", "FORMAT_VERSION", "CHANGELOG"]
