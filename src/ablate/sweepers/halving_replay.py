"""Would successive halving have chosen the same learning rates? Replayed on a finished full-grid ``tune=lr`` sweep.

    python scripts/halving_replay.py logs/multirun/<sweep>                        # rungs at 1/4 and 1/2
    python scripts/halving_replay.py logs/multirun/<sweep> --rungs 0.333333 0.5 --metric val/loss

Reads the sweep's stage 1 (the selection-seed jobs at every rate of each variant's grid, named by
``lr_tuning.json``) and replays ``hydra.sweeper.halving.rungs`` on their logged validation
curves: at each rung the better half (``floor(n/2)``, at least 1) of the rates still in, by the
metric at exactly that step, go on; the best finalist at full length is chosen. Exact, because a
rung of a halving sweep is the prefix of the full run (the same schedule and seed). Prints per
variant the full grid's choice, the halving choice, how many grid steps apart they are, and the
stage-1 compute as a fraction of the full grid's steps; then each rate's values through the rungs.
Exit 2 when a rung's step was not validated (the message names the steps that were) or the
directory is not a finished full-grid ``tune=lr`` sweep. Method: ``src/ablate/sweepers/halving.py``.
"""

from __future__ import annotations

import argparse
import sys

from ablate.sweepers.halving import replay_sweep, replay_table


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="halving_replay.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep_dir", help="a finished tune=lr sweep directory (logs/multirun/<sweep>)")
    parser.add_argument(
        "--rungs",
        type=float,
        nargs="+",
        default=[0.25, 0.5],
        metavar="FRACTION",
        help="fractions of trainer.max_steps at which the grid is halved, increasing in (0, 1) (default: 0.25 0.5)",
    )
    parser.add_argument("--metric", help="the selection metric (default: the sweep's, from lr_tuning.json)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        rows = replay_sweep(args.sweep_dir, args.rungs, args.metric)
    except (OSError, ValueError) as err:
        print(f"halving_replay.py: error: {err}", file=sys.stderr)
        sys.exit(2)
    print(replay_table(rows))
