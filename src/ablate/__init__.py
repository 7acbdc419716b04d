"""ablate: Transformer architecture ablations from the command line."""

from ablate.cli.help import register as _register_help
from ablate.config.resolvers import register as _register_resolvers

_register_resolvers()
_register_help()  # hydra.help.template: `train.py --help` (conf/hydra/default.yaml)
