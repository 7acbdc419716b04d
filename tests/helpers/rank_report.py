"""A rank function for tests/run/test_ddp.py, in a module that imports little (spawned ranks import it)."""

import os


def report_rank() -> tuple[str, str, bool]:
    from lightning.fabric.plugins.environments import TorchElasticEnvironment

    return os.environ["RANK"], os.environ["WORLD_SIZE"], TorchElasticEnvironment.detect()
