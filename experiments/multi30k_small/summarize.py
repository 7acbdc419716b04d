"""Print the learning curve of a translation run as a Markdown table (from its CSV metrics).

python experiments/multi30k_small/summarize.py logs/runs/multi30k_small
"""

import csv
import sys
from pathlib import Path


def main(run_dir: str) -> None:
    with open(Path(run_dir) / "csv" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    train = {int(r["step"]): float(r["train/loss"]) for r in rows if r.get("train/loss")}
    print("| step | train/loss (mean since last val) | val/loss | val/ppl | val/bleu (greedy, 500 sent.) |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    previous = -1
    for r in rows:
        if not r.get("val/loss"):
            continue
        step = int(r["step"])
        window = [v for s, v in train.items() if previous < s <= step]
        previous = step
        mean_train = sum(window) / len(window) if window else float("nan")
        bleu = f"{float(r['val/bleu']):.2f}" if r.get("val/bleu") else ""
        print(f"| {step + 1} | {mean_train:.3f} | {float(r['val/loss']):.3f} | {float(r['val/ppl']):.2f} | {bleu} |")
    for r in rows:
        if r.get("test/bleu"):
            print(
                f"\ntest/bleu {float(r['test/bleu']):.2f}, test/loss {float(r['test/loss']):.3f}, test/ppl {float(r['test/ppl']):.2f}"
            )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "logs/runs/multi30k_small")
