"""`python -m voicegate ...`: the same command as the `voicegate` script."""

import sys

from voicegate.server.cli import main

if __name__ == "__main__":
    sys.exit(main())
