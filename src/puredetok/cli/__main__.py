"""``python -m puredetok.cli``."""

import sys

from puredetok.cli import main

sys.exit(main())
