import sys

import engine  # noqa: F401  (thread/cache defaults before NumPy loads)

from .run import main

sys.exit(main())
