"""``python -m graphcap.cli ...``: the ``graphcap`` command without the console script."""
from . import entry_point

entry_point()
