"""Data: corpus sources, tokenizers and Lightning data modules (import from the modules; this package
re-exports nothing)."""
