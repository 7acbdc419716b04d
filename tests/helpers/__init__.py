"""What the tests share, imported as ``helpers.<module>`` (``tests/`` is on the path of every test
through ``tests/conftest.py``): no test module imports another test module."""
