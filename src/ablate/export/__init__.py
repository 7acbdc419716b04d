"""Exports of trained models to other libraries' formats (:mod:`ablate.export.hf`: Hugging Face)."""
