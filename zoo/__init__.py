"""zoo: a multi-domain model zoo on PyTorch Lightning.

Importing `zoo` stays cheap (no torch): the CLI answers `--help` without loading the heavy stack.
"""

__version__ = "0.1.0"
