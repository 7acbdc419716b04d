"""Gradient norm per layer at initialisation: Post-LN vs Pre-LN (Xiong et al. 2020, Fig. 3).

    python scripts/grad_norm_at_init.py experiment=xiong2020_prenorm_cpu --norms post pre
    python scripts/grad_norm_at_init.py task=translation data=multi30k model=transformer_iwslt_de_en \\
        norm=post,pre --batches 50 --repeats 3 --slots ffn attn --out experiments/xiong2020_prenorm/figures

Writes ``<out>/grad_norm_at_init.json`` and ``.png``. What it measures, and how:
:mod:`ablate.benchmark.grad_norm_at_init`.
"""

from ablate.benchmark.grad_norm_at_init import main

if __name__ == "__main__":
    main()
