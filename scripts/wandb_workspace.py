"""Build a saved W&B workspace for a sweep: loss/ppl/BLEU grouped by each ablation axis, LR and
warmup, per-layer gradient norms, residual RMS, throughput, and the summary table and figures.

    python scripts/wandb_workspace.py logs/multirun/<sweep>              # spec -> <sweep>/wandb_workspace.json
    python scripts/wandb_workspace.py --group <group> --entity ME         # from the group's W&B runs (online)
    python scripts/wandb_workspace.py --push logs/multirun/<sweep>/wandb_workspace.json   # save a spec later

With a sweep directory, ``summary.csv`` (scripts/summarize.py) and ``figures/*.png``
(scripts/plot.py), when present, are logged to a ``job_type=analysis`` run in the sweep's W&B
group and shown in the workspace. Offline, the spec is written and the commands that upload the
runs and save the workspace later are printed. The code: ``src/ablate/analysis/wandb_workspace.py``
(the spec's sections: ``src/ablate/analysis/wandb_views.py``); docs/analysis.md "W&B workspaces".
"""

import sys

from ablate.analysis.wandb_workspace import main

if __name__ == "__main__":
    sys.exit(main())
