"""Summarise a sweep: one row per configuration, seeds aggregated (mean ± std), diverged runs counted.

    python scripts/summarize.py logs/multirun/<sweep>                     # writes <sweep>/summary.{csv,md}
    python scripts/summarize.py logs/multirun/<sweep> --baseline norm=pre  # + 95% CIs, tests and verdicts vs norm=pre
    python scripts/summarize.py logs/multirun/<sweep> --plan               # the analysis its analysis_plan.json declares

Options and methods: ``src/ablate/analysis/commands/summarize.py``; docs/recipes.md "Is the difference real?".
"""

from ablate.analysis.commands.summarize import main

if __name__ == "__main__":
    main()
