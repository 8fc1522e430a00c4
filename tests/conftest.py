"""Test configuration: under CI (CI=true) hypothesis runs derandomized (the same examples every run, no
example database), so a green CI is reproducible; locally it explores new random examples each run."""
import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")
