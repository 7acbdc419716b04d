"""Effective compute multiplier of each variant over a baseline, from a sweep over model sizes.

    python train.py -m scale=xs,s,m act=gelu,swiglu seed=1,2,3          # the size ladder (conf/scale)
    python scripts/compute_multiplier.py logs/multirun/<sweep> --baseline act=gelu   # --scale-key scale

Options: ``src/ablate/analysis/commands/multiplier.py``; method: ``src/ablate/analysis/scaling.py``.
"""

from ablate.analysis.commands.multiplier import main

if __name__ == "__main__":
    main()
