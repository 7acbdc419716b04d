"""Job directory names: readable, unique, and short enough for the file system."""

from hydra.core.override_parser.overrides_parser import OverridesParser

from ablate.config.resolvers import MAX_DIRNAME, job_dirname, job_name


def test_short_names_are_the_overrides():
    assert job_dirname("norm=post,pos=rope") == "pos-rope.norm-post"  # architecture first, in axis order
    assert job_name(["seed=1", "norm=pre"]) == "norm-pre.seed-1"  # the seed last
    assert job_dirname("") == "default"
    assert job_dirname("data.train_path=a/b.txt").startswith("data.train_path-a_b.txt-")  # replaced: a hash


def test_names_paste_into_an_override_unquoted():
    """Folders were named ``norm=pre,pos=rope,seed=1``: every eval.py call on a sweep job needed
    ``ckpt_path="'...'"``."""
    jobs = [
        ["norm=pre", "pos=rope", "seed=1"],
        ["optim.betas=[0.9,0.95]", "data.train_path=my data/train.txt", "~callbacks.ema", "+model.dropout=0.1"],
        ["tags='a,b'", "optim.lr=1e-3", 'x="$(touch y)"'],
    ]
    for overrides in jobs:
        name = job_name(overrides)
        assert not set(name) & set("=,[]{}()'\" $~\\"), name
        path = f"logs/multirun/sweep/{name}/checkpoints/last.ckpt"
        assert OverridesParser.create().parse_override(f"ckpt_path={path}").value() == path


def test_names_that_lose_characters_stay_apart():
    a = job_name(["data.train_path=a b.txt"])
    b = job_name(["data.train_path=a_b.txt"])
    assert a != b and b == "data.train_path-a_b.txt"


def test_long_names_keep_architecture_first_and_stay_unique():
    noise = ",".join(f"trainer.option_{i}=value_{i}" for i in range(12))
    a = job_dirname(f"{noise},norm=post,pos=rope")
    b = job_dirname(f"{noise},norm=pre,pos=rope")
    assert a != b
    assert len(a) <= MAX_DIRNAME and len(b) <= MAX_DIRNAME
    assert a.startswith("pos-rope.norm-post."), a
    assert job_dirname(f"{noise},norm=post,pos=rope") == a  # stable across re-runs


def test_distinct_sweep_names_never_share_a_directory():
    from ablate.config.resolvers import sweep_dirname

    assert sweep_dirname("norm-study", []) == "norm-study"  # a safe name stays as typed
    names = ["α", "β", "my sweep", "my_sweep", "a/b", "a_b"]
    dirs = [sweep_dirname(n, []) for n in names]
    assert len(set(dirs)) == len(names), dirs


def test_a_long_name_keeps_its_seed():
    noise = [f"trainer.option_{i}=value_{i}" for i in range(12)]
    names = {job_name([*noise, "norm=post", f"seed={s}"]) for s in (1, 2)}
    assert len(names) == 2 and all(len(n) <= MAX_DIRNAME for n in names)
    assert any(".seed-1-" in n for n in names) and any(".seed-2-" in n for n in names)
