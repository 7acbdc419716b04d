"""Job directory names: readable, unique, and short enough for the file system."""

from ablate.config.resolvers import MAX_DIRNAME, job_dirname


def test_short_names_are_the_overrides():
    assert job_dirname("norm=post,pos=rope") == "norm=post,pos=rope"
    assert job_dirname("") == "default"
    assert job_dirname("data.train_path=a/b.txt") == "data.train_path=a_b.txt"


def test_long_names_keep_architecture_first_and_stay_unique():
    noise = ",".join(f"trainer.option_{i}=value_{i}" for i in range(12))
    a = job_dirname(f"{noise},norm=post,pos=rope")
    b = job_dirname(f"{noise},norm=pre,pos=rope")
    assert a != b
    assert len(a) <= MAX_DIRNAME and len(b) <= MAX_DIRNAME
    assert a.startswith("pos=rope,norm=post") or a.startswith("norm=post,pos=rope"), a
    assert job_dirname(f"{noise},norm=post,pos=rope") == a  # stable across re-runs


def test_distinct_sweep_names_never_share_a_directory():
    from ablate.config.resolvers import sweep_dirname

    assert sweep_dirname("norm-study", []) == "norm-study"  # a safe name stays as typed
    names = ["α", "β", "my sweep", "my_sweep", "a/b", "a_b"]
    dirs = [sweep_dirname(n, []) for n in names]
    assert len(set(dirs)) == len(names), dirs
