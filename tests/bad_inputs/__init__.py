"""Bad-input cases (cases.py) and reader fuzz harnesses (harness.py), shared by the tests and bench/fuzz.py."""
