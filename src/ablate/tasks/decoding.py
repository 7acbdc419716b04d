"""Greedy and beam-search decoding for :class:`ablate.nn.seq2seq.EncoderDecoder`, with a KV cache.

The encoder runs once, the decoder one cached position per step; a sentence leaves the batch when
done. At most ``max_len_a * source_length + max_len_b`` tokens (fairseq's). Beam search looks at
the ``2 * beam_size`` best extensions at every step, as fairseq's ``SequenceGenerator``; closed
hypotheses are ranked by log P(Y|X) / lp(Y) with GNMT's length penalty
``lp(Y) = ((5 + |Y|) / 6) ** alpha`` (Wu et al. 2016, eq. 14; Vaswani et al. 2017 use 0.6),
|Y| counting the end token. ``beam_size=1`` is exactly greedy decoding (tested).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ablate.nn.seq2seq import EncoderDecoder
from ablate.tasks.decode_config import DecodeConfig

NEG_INF = float("-inf")


@dataclass(frozen=True)
class SpecialIds:
    pad: int
    bos: int
    eos: int


def length_penalty(length: int, alpha: float) -> float:
    """GNMT (Wu et al. 2016, eq. 14): ((5 + |Y|) / 6) ** alpha."""
    return ((5.0 + length) / 6.0) ** alpha


def max_lengths(src_mask: Tensor, a: float, b: int, cap: int) -> Tensor:
    """Per-sentence limit on generated tokens (the end token not counted), (B,) long."""
    src_len = src_mask.sum(dim=1).double()
    limit = torch.floor(a * src_len + b).long()
    return limit.clamp(min=1, max=max(1, cap))


class _IncrementalDecoder:
    """Runs the decoder one step at a time over N rows, with or without the KV cache."""

    def __init__(self, model: EncoderDecoder, memory: Tensor, src_mask: Tensor, use_cache: bool) -> None:
        self.model, self.memory, self.src_mask = model, memory, src_mask
        self.caches = model.new_caches() if use_cache else None

    def log_probs(self, tokens: Tensor) -> Tensor:
        """tokens (N, t): the prefixes so far -> (N, V) log-probabilities of the next token."""
        if self.caches is not None:
            logits = self.model.decode(tokens[:, -1:], self.memory, self.src_mask, self.caches)
        else:
            logits = self.model.decode(tokens, self.memory, self.src_mask)
        return logits[:, -1].float().log_softmax(dim=-1)

    def select(self, rows: Tensor, sentence_rows: Tensor | None = None) -> None:
        """Keep the decoder states of ``rows``; what depends on the source alone is gathered only
        when sentences leave (``sentence_rows``: a row of each kept sentence, in the new order)."""
        for cache in self.caches or []:
            if cache.self_attn.k is not None:
                assert cache.self_attn.v is not None  # KVCache.append sets both
                cache.self_attn.k = cache.self_attn.k.index_select(0, rows)
                cache.self_attn.v = cache.self_attn.v.index_select(0, rows)
            if sentence_rows is not None and cache.cross_attn.k is not None:
                assert cache.cross_attn.v is not None
                cache.cross_attn.k = cache.cross_attn.k.index_select(0, sentence_rows)
                cache.cross_attn.v = cache.cross_attn.v.index_select(0, sentence_rows)
        if sentence_rows is not None:
            self.memory, self.src_mask = (
                self.memory.index_select(0, sentence_rows),
                self.src_mask.index_select(0, sentence_rows),
            )


def _forbid(lprobs: Tensor, ids: SpecialIds) -> None:
    lprobs[..., ids.pad] = NEG_INF
    lprobs[..., ids.bos] = NEG_INF


def _force_eos(lprobs: Tensor, ending: list[bool], eos: int) -> None:
    """Rows (sentences) whose length limit is reached can only end: all mass on the end token.
    ``ending`` is known on the host (the limits are read once), so this costs no device read."""
    if any(ending):
        rows = torch.tensor(ending, device=lprobs.device)
        lprobs[rows] = NEG_INF
        lprobs[rows, ..., eos] = 0.0


@torch.no_grad()
def greedy_search(
    model: EncoderDecoder,
    src: Tensor,
    src_mask: Tensor,
    ids: SpecialIds,
    *,
    max_len_a: float = 1.2,
    max_len_b: int = 10,
    use_cache: bool = True,
) -> list[list[int]]:
    """The most probable token at every step; returns each sentence's tokens without BOS/EOS."""
    n = src.size(0)
    memory = model.encode(src, src_mask)
    limits = max_lengths(src_mask, max_len_a, max_len_b, model.spec.max_len - 1).tolist()
    decoder = _IncrementalDecoder(model, memory, src_mask, use_cache)
    tokens = torch.full((n, 1), ids.bos, dtype=torch.long, device=src.device)
    out: list[list[int]] = [[] for _ in range(n)]
    active = list(range(n))  # the sentence of each row
    for t in range(max(limits) + 1):
        lprobs = decoder.log_probs(tokens)
        _forbid(lprobs, ids)
        _force_eos(lprobs, [limits[s] <= t for s in active], ids.eos)
        nxt = lprobs.argmax(dim=-1)
        ended = []
        for row, (s, token) in enumerate(zip(active, nxt.tolist())):  # one device read a step
            if token == ids.eos:
                ended.append(row)
            else:
                out[s].append(token)
        if len(ended) == len(active):
            break
        tokens = torch.cat((tokens, nxt[:, None]), dim=1)
        if ended:
            stop = set(ended)
            keep = [row for row in range(len(active)) if row not in stop]
            rows = torch.tensor(keep, device=src.device)
            tokens = tokens.index_select(0, rows)
            decoder.select(rows, rows)
            active = [active[row] for row in keep]
    return out


@torch.no_grad()
def beam_search(
    model: EncoderDecoder,
    src: Tensor,
    src_mask: Tensor,
    ids: SpecialIds,
    *,
    beam_size: int = 4,
    length_penalty_alpha: float = 0.6,
    max_len_a: float = 1.2,
    max_len_b: int = 10,
    use_cache: bool = True,
) -> list[list[int]]:
    """Batched beam search (module docstring); returns the best hypothesis per sentence."""
    b, k = src.size(0), beam_size
    device = src.device
    memory = model.encode(src, src_mask)
    limits = max_lengths(src_mask, max_len_a, max_len_b, model.spec.max_len - 1).tolist()
    decoder = _IncrementalDecoder(
        model, memory.repeat_interleave(k, dim=0), src_mask.repeat_interleave(k, dim=0), use_cache
    )
    tokens = torch.full((b * k, 1), ids.bos, dtype=torch.long, device=device)
    scores = torch.zeros(b, k, device=device)
    scores[:, 1:] = NEG_INF  # all beams start identical: expand only the first
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(b)]
    active = list(range(b))  # the sentence of each block of k rows
    ranks = torch.arange(2 * k, device=device)
    beams = torch.arange(k, device=device)
    for t in range(max(limits) + 1):
        n = len(active)
        lprobs = decoder.log_probs(tokens).view(n, k, -1)
        _forbid(lprobs, ids)
        _force_eos(lprobs, [limits[s] <= t for s in active], ids.eos)
        top_scores, parent, token = _best_extensions(scores, lprobs)
        is_eos = token == ids.eos
        # close hypotheses: end tokens among the first k candidates, in order of sentence then rank
        closing = (is_eos[:, :k] & torch.isfinite(top_scores[:, :k])).nonzero()
        if len(closing):
            penalty = length_penalty(t + 1, length_penalty_alpha)
            _close_hypotheses(finished, active, closing, tokens, parent, top_scores, k, penalty)
        done = [i for i, s in enumerate(active) if len(finished[s]) >= k or limits[s] <= t]
        if len(done) == n:
            break
        scores, rows, next_tokens = _continuing(top_scores, parent, token, is_eos, k, ranks)
        blocks = None
        if done:  # the sentences that are done leave
            stop = set(done)
            keep = torch.tensor([i for i in range(n) if i not in stop], device=device)
            rows, next_tokens, scores = rows[keep], next_tokens[keep], scores[keep]
            blocks = (keep[:, None] * k + beams).view(-1)
            active = [s for i, s in enumerate(active) if i not in stop]
        rows = rows.view(-1)
        tokens = torch.cat((tokens.index_select(0, rows), next_tokens.view(-1, 1)), dim=1)
        decoder.select(rows, blocks)
    # max keeps the first of equals; a sentence with no hypothesis cannot happen with a finite model (kept total)
    return [max(hyps, key=lambda h: h[0])[1] if hyps else [] for hyps in finished]


def _best_extensions(scores: Tensor, lprobs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The ``2k`` best extensions of each sentence's ``k`` beams (``lprobs``: (n, k, V)): scores, parent beams, tokens."""
    n, k, vocab = lprobs.shape
    candidates = (scores[:, :, None] + lprobs).view(n, k * vocab)
    top_scores, top_index = candidates.topk(min(2 * k, k * vocab), dim=1)
    return top_scores, top_index // vocab, top_index % vocab


def _close_hypotheses(
    finished: list[list[tuple[float, list[int]]]],
    active: list[int],
    closing: Tensor,
    tokens: Tensor,
    parent: Tensor,
    top_scores: Tensor,
    k: int,
    penalty: float,
) -> None:
    """Close the ``(sentence, rank)`` candidates of ``closing``: a sentence keeps its first ``k``, scored log P / lp."""
    sentence, rank = closing[:, 0], closing[:, 1]
    hyps = tokens.index_select(0, sentence * k + parent[sentence, rank])[:, 1:].tolist()
    closed = top_scores[sentence, rank].tolist()
    for (i, _), hyp, score in zip(closing.tolist(), hyps, closed):
        s = active[i]
        if len(finished[s]) < k:
            finished[s].append((score / penalty, hyp))


def _continuing(
    top_scores: Tensor, parent: Tensor, token: Tensor, is_eos: Tensor, k: int, ranks: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """The ``k`` best non-end extensions of each sentence (stable order: by rank): scores, parent rows, tokens."""
    n = parent.size(0)
    order = (is_eos.long() * (2 * k) + ranks[: is_eos.size(1)]).argsort(dim=1)[:, :k]
    scores = top_scores.gather(1, order).masked_fill(is_eos.gather(1, order), NEG_INF)
    rows = torch.arange(n, device=parent.device)[:, None] * k + parent.gather(1, order)  # (n, k) parents
    return scores, rows, token.gather(1, order)


def translate_tokens(
    model: EncoderDecoder, src: Tensor, src_mask: Tensor, ids: SpecialIds, cfg: DecodeConfig
) -> list[list[int]]:
    """Greedy for ``beam_size == 1`` (same result, less work), beam search otherwise."""
    was_training = model.training
    model.eval()
    try:
        if cfg.beam_size == 1:
            return greedy_search(
                model, src, src_mask, ids, max_len_a=cfg.max_len_a, max_len_b=cfg.max_len_b, use_cache=cfg.use_cache
            )
        return beam_search(
            model,
            src,
            src_mask,
            ids,
            beam_size=cfg.beam_size,
            length_penalty_alpha=cfg.length_penalty,
            max_len_a=cfg.max_len_a,
            max_len_b=cfg.max_len_b,
            use_cache=cfg.use_cache,
        )
    finally:
        model.train(was_training)
