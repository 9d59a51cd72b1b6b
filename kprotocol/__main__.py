import sys

from kprotocol.cli import main

sys.exit(main())
