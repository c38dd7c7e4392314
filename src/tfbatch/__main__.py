import sys

from tfbatch.cli import main

sys.exit(main())
