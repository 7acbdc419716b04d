"""Turning a sweep (a Hydra multirun directory or a W&B group) into tables and figures;
``scripts/summarize.py``, ``scripts/plot.py`` and ``scripts/attention_maps.py`` are thin command
lines over these modules.
"""
