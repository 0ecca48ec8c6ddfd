"""``python -m graphcap.cli ...``: the ``graphcap`` command without the console script."""
from . import entry_point

if __name__ == "__main__":
    entry_point()
