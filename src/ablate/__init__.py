"""ablate: Transformer architecture ablations from the command line."""

from ablate.config.resolvers import register as _register_resolvers

_register_resolvers()
