"""``python -m metalrt.server``: the same server and settings as ``metalrt serve``."""
import sys

from ..cli import main

if __name__ == "__main__":
    sys.exit(main(["serve", *sys.argv[1:]]))
