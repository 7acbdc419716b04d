"""Measure LM corpus preparation against the tokenizer library's own speed on the same file.

    python scripts/benchmark_data.py                      # 0.2, 1 and 4 GB of synthetic text (~1 h on 2 cores)
    python scripts/benchmark_data.py --sizes 0.2 --vocab-size 8192

For each size it writes a synthetic corpus (Zipf-distributed pseudo-words, lines of 5-30 words),
then, one after the other on the same file, in fresh processes (ours first):

- **ours**: ``TextFiles(tokenizer="bpe")`` prepares its cache (BPE merges learned on the train
  split streamed in chunks, ids written batch by batch; checksums; start-up of torch included);
- **library**: Hugging Face ``tokenizers`` alone, with every thread: ``Tokenizer.train([file])``
  (its Rust reader) and ``encode_batch_fast`` over the file's lines in batches, the ids written
  to a uint16 file.

It reports wall time, MB/s and peak RSS (``ru_maxrss`` of each process) and the ratio of the two
times, as a table on the console and ``benchmark_data.json`` / ``.md`` in ``--out``. The goals
(issue 20): time within 1.25x of the library's, peak RSS flat in the corpus size (at most 1.5 GB at
4 GB of text). A ratio is only meaningful when nothing else competes for the cores: the script
prints the load average at start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

OURS = textwrap.dedent(
    """
    import json, resource, sys, time
    start = time.perf_counter()
    from ablate.data.lm_data import TextFiles
    train, val, cache, vocab = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    TextFiles(train, val, cache_dir=cache, tokenizer="bpe", vocab_size=vocab, seq_len=8).prepare_data()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"seconds": time.perf_counter() - start, "peak_rss": rss}))
    """
)

LIBRARY = textwrap.dedent(
    """
    import json, resource, sys, time
    start = time.perf_counter()
    import numpy as np
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    train, out, vocab = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train([train], trainer)
    with open(train, encoding="utf-8") as f, open(out, "wb") as sink:
        while lines := f.readlines(1 << 22):
            for e in tok.encode_batch_fast(lines):
                np.asarray(e.ids, dtype=np.uint16).tofile(sink)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"seconds": time.perf_counter() - start, "peak_rss": rss}))
    """
)


def write_corpus(path: Path, num_bytes: int, seed: int = 0) -> None:
    """About ``num_bytes`` of text: a pool of 200,000 lines of Zipf-distributed pseudo-words,
    written in shuffled orders until the size is reached (never held whole)."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlucmfwypvbgkjqxz"))
    words = ["".join(rng.choice(letters, size=rng.integers(2, 10))) for _ in range(50_000)]
    ranks = np.minimum(rng.zipf(1.2, size=3_000_000), len(words)) - 1
    pool, i = [], 0
    for length in rng.integers(5, 31, size=200_000):
        pool.append(" ".join(words[r] for r in ranks[i : i + length]) + "\n")
        i = (i + length) % (len(ranks) - 31)
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < num_bytes:
            block = "".join(pool[j] for j in rng.permutation(len(pool)))
            block = block[: num_bytes - written]
            block = block[: block.rfind("\n") + 1] or block
            f.write(block)
            written += len(block)


def run(script: str, *args: str) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"benchmark child failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(size_gb: float, work: Path, vocab: int) -> dict[str, float]:
    folder = work / f"{size_gb:g}GB"
    folder.mkdir(parents=True, exist_ok=True)
    train, val = folder / "train.txt", folder / "val.txt"
    if not train.is_file() or abs(train.stat().st_size - size_gb * 1e9) > 1e6:
        print(f"writing {size_gb:g} GB of synthetic text to {train}", flush=True)
        write_corpus(train, int(size_gb * 1e9))
        write_corpus(val, 1_000_000, seed=1)
    mb = train.stat().st_size / 1e6
    shutil.rmtree(folder / "cache", ignore_errors=True)
    ours = run(OURS, str(train), str(val), str(folder / "cache"), str(vocab))
    print(f"  ours:    {ours['seconds']:.0f} s, peak RSS {ours['peak_rss'] / 1e9:.2f} GB", flush=True)
    library = run(LIBRARY, str(train), str(folder / "library.bin"), str(vocab))
    print(f"  library: {library['seconds']:.0f} s, peak RSS {library['peak_rss'] / 1e9:.2f} GB", flush=True)
    (folder / "library.bin").unlink(missing_ok=True)
    shutil.rmtree(folder / "cache", ignore_errors=True)
    return {
        "size_gb": size_gb,
        "text_mb": mb,
        "ours_s": ours["seconds"],
        "library_s": library["seconds"],
        "ratio": ours["seconds"] / library["seconds"],
        "ours_mb_per_s": mb / ours["seconds"],
        "library_mb_per_s": mb / library["seconds"],
        "ours_peak_rss_gb": ours["peak_rss"] / 1e9,
        "library_peak_rss_gb": library["peak_rss"] / 1e9,
    }


def table(rows: list[dict[str, float]]) -> str:
    lines = [
        "| text | ours | library | ratio (goal <= 1.25) | ours MB/s | peak RSS ours (goal <= 1.5 GB) | peak RSS library |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['text_mb']:,.0f} MB | {r['ours_s']:.0f} s | {r['library_s']:.0f} s | {r['ratio']:.2f} | "
            f"{r['ours_mb_per_s']:.2f} | {r['ours_peak_rss_gb']:.2f} GB | {r['library_peak_rss_gb']:.2f} GB |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="0.2,1,4", help="corpus sizes in GB, comma-separated")
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--work", type=Path, default=Path("logs/benchmarks/data"), help="corpora and caches")
    parser.add_argument("--keep-corpora", action="store_true", help="keep the synthetic text for the next run")
    args = parser.parse_args(argv)
    sizes = [float(s) for s in args.sizes.split(",")]
    load_start = os.getloadavg()[0]
    rows = []
    for size in sizes:
        print(f"{size:g} GB:", flush=True)
        rows.append(measure(size, args.work, args.vocab_size))
        if not args.keep_corpora:
            shutil.rmtree(args.work / f"{size:g}GB", ignore_errors=True)
    report = table(rows)
    header = (
        f"{os.cpu_count()} CPUs, vocab {args.vocab_size}, load average {load_start:.2f} at start, "
        f"{os.getloadavg()[0]:.2f} at end, {time.strftime('%Y-%m-%d')}"
    )
    print(f"\n{header}\n\n{report}")
    args.work.mkdir(parents=True, exist_ok=True)
    (args.work / "benchmark_data.json").write_text(json.dumps({"machine": header, "rows": rows}, indent=2))
    (args.work / "benchmark_data.md").write_text(f"{header}\n\n{report}\n")
