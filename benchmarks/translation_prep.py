"""Translation data preparation at WMT14 size: speed and peak memory on a synthetic parallel corpus.

    python scripts/benchmark_translation_data.py                    # 4.5 M pairs (~1.3 GB), as WMT14 En-De
    python scripts/benchmark_translation_data.py --pairs 1000000 --dir /tmp/synthetic   # files kept there
    python scripts/benchmark_translation_data.py --pairs 200000 --words 8 --json   # one JSON line (tests)

Writes ``--pairs`` training pairs of synthetic sentences to ``train.{src,tgt}`` and 3,000 to
``val.{src,tgt}`` (newstest size; also the test split): words drawn from a Zipf distribution over
``--types`` random word forms per language, the target side with umlauts so that it is multi-byte
UTF-8, ``--words`` words per sentence on average (about 150 bytes a line, as in WMT14). Then it
prepares them (``ParallelFiles``: joint BPE, token cache, ``setup()``'s length batching) in a fresh
process, so that its peak RSS (``ru_maxrss``) measures the preparation alone, and prints pairs/s and
MB/s of training text, and the peak RSS before and after preparing.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CHUNK = 100_000  # pairs generated at a time: the generator's own memory stays small
VAL_PAIRS = 3000


def word_forms(rng: np.random.Generator, types: int, alphabet: str) -> np.ndarray:
    """``types`` random words of 2-10 letters (duplicates are harmless: they just merge ranks)."""
    lengths = rng.integers(2, 11, types)
    letters = "".join(rng.choice(list(alphabet), int(lengths.sum())).tolist())
    ends = np.cumsum(lengths)
    return np.array([letters[e - n : e] for e, n in zip(ends.tolist(), lengths.tolist())], dtype=object)


def sentences(rng: np.random.Generator, forms: np.ndarray, cdf: np.ndarray, lengths: np.ndarray) -> str:
    """One line per entry of ``lengths``, that many Zipf-distributed words each."""
    words = forms[np.searchsorted(cdf, rng.random(int(lengths.sum())))].tolist()
    ends = np.cumsum(lengths).tolist()
    return "".join(" ".join(words[e - n : e]) + "\n" for e, n in zip(ends, lengths.tolist()))


def write_synthetic_pairs(
    src: Path, tgt: Path, pairs: int, words: int = 22, types: int = 500_000, seed: int = 0
) -> int:
    """Write ``pairs`` aligned lines to ``src`` and ``tgt``; returns the bytes written. Target
    lengths follow the source's within +-3 words, as a translation's do."""
    rng = np.random.default_rng(seed)
    ranks = 1.0 / np.arange(1, types + 1)
    cdf = np.cumsum(ranks) / ranks.sum()
    forms = {
        src: word_forms(rng, types, "abcdefghijklmnopqrstuvwxyz"),
        tgt: word_forms(rng, types, "abdeghiklmnorstuäöüß"),
    }
    with open(src, "w", encoding="utf-8") as f_src, open(tgt, "w", encoding="utf-8") as f_tgt:
        for start in range(0, pairs, CHUNK):
            src_len = rng.integers(1, 2 * words, min(CHUNK, pairs - start))
            tgt_len = np.clip(src_len + rng.integers(-3, 4, len(src_len)), 1, None)
            f_src.write(sentences(rng, forms[src], cdf, src_len))
            f_tgt.write(sentences(rng, forms[tgt], cdf, tgt_len))
    return src.stat().st_size + tgt.stat().st_size


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def measure(folder: Path, vocab_size: int) -> dict[str, float]:
    """Prepare the corpus in ``folder`` (this process: call it in a fresh one); times and peak RSS."""
    from ablate.data.translation_data import ParallelFiles

    src, tgt = folder / "train.src", folder / "train.tgt"
    dm = ParallelFiles(
        train_src=str(src),
        train_tgt=str(tgt),
        val_src=str(folder / "val.src"),
        val_tgt=str(folder / "val.tgt"),
        cache_dir=str(folder / "cache"),
        vocab_size=vocab_size,
    )
    before = peak_rss_mb()
    start = time.perf_counter()
    dm.prepare_data()
    prepared = time.perf_counter()
    dm.setup()
    done = time.perf_counter()
    return {
        "pairs": len(dm.datasets["train"].src),
        "batches": len(dm.datasets["train"]),
        "input_mb": (src.stat().st_size + tgt.stat().st_size) / 1e6,
        "prepare_s": prepared - start,
        "setup_s": done - prepared,
        "peak_rss_before_mb": before,
        "peak_rss_mb": peak_rss_mb(),
    }


def report(result: dict[str, float]) -> str:
    total = result["prepare_s"] + result["setup_s"]
    growth = result["peak_rss_mb"] - result["peak_rss_before_mb"]
    return "\n".join(
        [
            f"training pairs:   {result['pairs']:,.0f} ({result['input_mb']:,.0f} MB of text, both sides)",
            f"prepare_data():   {result['prepare_s']:,.1f} s  (joint BPE, then the token files)",
            f"setup():          {result['setup_s']:,.1f} s  ({result['batches']:,.0f} training batches)",
            f"throughput:       {result['pairs'] / total:,.0f} pairs/s, {result['input_mb'] / total:,.2f} MB/s",
            f"peak RSS:         {result['peak_rss_mb']:,.0f} MB "
            f"({result['peak_rss_before_mb']:,.0f} MB after imports, +{growth:,.0f} MB preparing)",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=4_500_000, help="synthetic pairs (default: WMT14 En-De's 4.5 M)")
    parser.add_argument("--words", type=int, default=22, help="mean words per sentence")
    parser.add_argument("--types", type=int, default=500_000, help="word forms per language")
    parser.add_argument("--vocab-size", type=int, default=37000, help="joint BPE vocabulary (WMT14 config: 37000)")
    parser.add_argument(
        "--dir", type=Path, help="write the corpus and its cache here and keep them (default: a temp dir)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON line instead of the report")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # the fresh process's part
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure, args.vocab_size)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.dir or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        written = write_synthetic_pairs(folder / "train.src", folder / "train.tgt", args.pairs, args.words, args.types)
        write_synthetic_pairs(folder / "val.src", folder / "val.tgt", VAL_PAIRS, args.words, args.types, seed=1)
        if not args.json:
            print(
                f"wrote {args.pairs:,} pairs ({written / 1e6:,.0f} MB) in {time.perf_counter() - start:.0f} s to {folder}"
            )
        cmd = [sys.executable, "-m", __name__, "--measure", str(folder), "--vocab-size", str(args.vocab_size)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, stdin=subprocess.DEVNULL).stdout
        result = json.loads(out.strip().splitlines()[-1])
    print(json.dumps(result) if args.json else report(result))


if __name__ == "__main__":  # the fresh process that prepares (``--measure``)
    main()
