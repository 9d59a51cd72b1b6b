"""Entry point for spark-submit and `python -m kprotocol.pipeline`: the `kprotocol pipeline` command.

    kprotocol pipeline package --out dist/
    PYSPARK_DRIVER_PYTHON=python PYSPARK_PYTHON=./environment/bin/python \
        spark-submit --master spark://host:7077 --archives dist/kprotocol-env.tar.gz#environment \
        "$(python -c 'import kprotocol.pipeline.__main__ as m; print(m.__file__)')" offsets PATH... --out DIR
"""

import sys

from kprotocol.cli import main

if __name__ == "__main__":
    sys.exit(main(["pipeline", *sys.argv[1:]]))
