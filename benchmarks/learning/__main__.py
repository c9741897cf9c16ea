import sys

from engine.runtime import configure

configure(tune_allocator=True)  # same process settings as training

from .run import main

sys.exit(main())
