"""The training compute of a job, from its config and record, as the budget comparisons and the
compute multiplier both count it: tokens seen x FLOPs per token (:func:`ablate.nn.flops.flops_per_token`,
as ``train/mfu`` counts them, or Kaplan et al.'s 6N), N = ``status.json`` params."""

from __future__ import annotations

from ablate.analysis.job import Job
from ablate.nn.flops import flops_per_token
from ablate.tasks import TASKS

FLOPS = ("6N+attn", "6N")  # how a job's FLOPs per token are counted: with the attention term, or 6N


def required_number(job: Job, key: str) -> float:
    """The job's config value of ``key`` as a number; ValueError naming the key when it is not one."""
    value = job.value(key)
    try:
        return float(str(value))  # a missing key (None) fails here too
    except ValueError:
        raise ValueError(
            f"{job.source}: {key} = {value!r} in its config, not a number: cannot count its training compute"
        ) from None


def tokens_seen(job: Job) -> float:
    """Optimiser steps x ``data.batch_size`` x the task's ``batch_tokens_key`` (``data.seq_len``)."""
    if job.task not in TASKS:
        raise ValueError(f"{job.source}: task={job.task} is not registered: cannot count its training tokens")
    per_step = required_number(job, TASKS[job.task].batch_tokens_key)
    return float(job.record.get("steps") or 0) * required_number(job, "data.batch_size") * per_step


def transformer_layers(job: Job) -> float:
    """All Transformer layers (decoder, plus encoder for translation), as ``ModelSpec`` counts them."""
    decoder = "model.n_layers" if job.value("model.n_layers") not in (None, "null") else "model.decoder_layers"
    encoder = job.value("model.encoder_layers")
    return required_number(job, decoder) + (float(encoder) if encoder not in (None, "null") else 0.0)


def job_compute(job: Job, flops: str = "6N+attn") -> float:
    """Training FLOPs of ``job``: FLOPs per token (``6N+attn`` or ``6N``) x :func:`tokens_seen`."""
    if job.record.get("params") is None:
        raise ValueError(f"{job.source}: status.json has no `params`: cannot count its training compute")
    params = float(job.record["params"])
    if flops == "6N":
        per_token = 6 * params
    elif flops == "6N+attn":
        per_token = job_flops_per_token(job)
    else:
        raise ValueError(f"flops={flops!r}: use one of {', '.join(FLOPS)}")
    return per_token * tokens_seen(job)


def job_flops_per_token(job: Job) -> float:
    """:func:`ablate.nn.flops.flops_per_token` of ``job``; ValueError naming what is missing."""
    if job.record.get("params") is None:
        raise ValueError("status.json has no `params`")
    params, layers = float(job.record["params"]), transformer_layers(job)
    d_model, seq_len = required_number(job, "model.d_model"), required_number(job, "data.seq_len")
    return float(flops_per_token(params, layers, d_model, seq_len))
