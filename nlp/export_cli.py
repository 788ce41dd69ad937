"""`python -m nlp.export_cli <checkpoint.ckpt> <out_dir>`: a zoo nlp/bert checkpoint in Hugging Face format.

Kept apart from nlp.export, which nlp.module imports: the command line needs the module class, the callback does not.
"""

from __future__ import annotations

import sys

from nlp.export import export_hf
from nlp.module import SequenceClassifier
from zoo.checkpoint import load_checkpoint
from zoo.errors import ZooError, one_line


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m nlp.export_cli <checkpoint.ckpt> <out_dir>", file=sys.stderr)
        return 2
    try:
        load_checkpoint(argv[0])  # one clear line for a missing or corrupt file
        module = SequenceClassifier.load_from_checkpoint(argv[0], map_location="cpu", weights_only=True)
    except ZooError as e:
        print(f"zoo: error: {one_line(e)}", file=sys.stderr)
        return 2
    print(export_hf(module, argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
