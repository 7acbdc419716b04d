"""The composed Hydra config, read and checked (this package's ``__init__`` imports nothing).

- :mod:`~ablate.run.config`: the composed config typed once (``RunConfig``): keys, types, ranges;
- :mod:`~ablate.config.types`: the machinery of keys, types and rules;
- :mod:`~ablate.config.checks`: the Trainer's and data's number rules, combinations and start warnings;
- :mod:`~ablate.config.resolvers`, :mod:`~ablate.config.locations`: the OmegaConf resolvers and
  where data, caches and logs live; :mod:`~ablate.config.dotted`: dotted-key helpers.
"""
