"""The Lightning callbacks of a training run: what it measures and shows (grad_norm, residual_rms,
throughput, divergence, progress), how it keeps its state (checkpointing: ``last.ckpt``, atomic
writes, the resume state; averaging: EMA, step checkpoints) and how it stops (interrupt: Ctrl-C
and SIGTERM after the step). Import from the modules; this package re-exports nothing."""
