"""``python -m fedjax_avail`` is the ``fedjax-avail`` command."""

import sys

from fedjax_avail.cli import main

sys.exit(main())
