"""Declare a sweep's analysis plan before its verdict runs start (``src/ablate/analysis/commands/declare.py``).

    python scripts/declare.py logs/multirun/<sweep> --metric test/bpb --baseline norm=pre --margin 0.03 \\
        --margin-basis "why 0.03, set before the data" --seeds 11,12,13
"""

from ablate.analysis.commands.declare import main

if __name__ == "__main__":
    main()
