import sys

from engine.pipeline.keeper.main import main

sys.exit(main(sys.argv[1:]))
