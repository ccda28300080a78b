"""`python -m tuner`: the convtune command line."""

import sys

from tuner.cli import main

sys.exit(main())
