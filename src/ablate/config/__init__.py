"""The composed Hydra config, read and checked (this package's ``__init__`` imports nothing, so
``ablate.config.options`` stays light for the task registry).

- :mod:`~ablate.config.model`: the architecture keys -> :class:`~ablate.nn.spec.ModelSpec`
  (``model_spec``), with its checks;
- :mod:`~ablate.config.options`: each option's own keys (``ConfigError`` names the key and the
  valid choices);
- :mod:`~ablate.config.run`: the composed config typed once (``RunConfig``): every key, type and range;
- :mod:`~ablate.config.types`: the machinery of keys, types and rules;
- :mod:`~ablate.config.checks`: the Trainer's and data's number rules, combinations and start warnings;
- :mod:`~ablate.config.resolvers`, :mod:`~ablate.config.locations`: the OmegaConf resolvers and
  where data, caches and logs live; :mod:`~ablate.config.dotted`: dotted-key helpers.
"""
