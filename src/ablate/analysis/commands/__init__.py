"""The analysis scripts' command lines (``scripts/<name>.py`` is a thin entry point over
``main`` here): ``summarize``, ``multiplier`` (``compute_multiplier.py``), ``plot`` and ``declare``.
Each ``main(argv)`` exits 2 on a user error (a bad argument, or one only the sweep can check), with one
message and no traceback."""
