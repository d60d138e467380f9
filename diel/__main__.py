"""``python -m diel`` is the ``diel`` command."""

import sys

from diel.cli import main

sys.exit(main())
