"""Follow the run's raw config through the code: where does ``cfg`` travel?

    python scripts/config_walk.py            # the tree of calls that pass the config on, and the counts
    python scripts/config_walk.py --max-returns 8   # exit 1 if the entry file hands it out more often

The walk and what it counts: :mod:`ablate.benchmark.config_walk`.
"""

import sys

from ablate.benchmark.config_walk import main

if __name__ == "__main__":
    sys.exit(main())
