"""``python -m graphcap ...``: the ``graphcap`` command without the console script."""
from .cli import entry_point

if __name__ == "__main__":
    entry_point()
