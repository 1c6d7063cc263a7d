import sys

from engine.secrets import protect

protect()  # before anything else: keys out of the environment, re-exec, non-dumpable

from engine.cli import main  # noqa: E402

sys.exit(main())
