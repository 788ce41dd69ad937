"""Every number README.md, the guides and the results pages quote comes from one record under docs/results/records/
(scripts/render_docs.py renders it between `<!--r <id> ...-->` markers): a page fails here when a marked number
differs from its record, a marker names a record that does not exist, a headline number carries no marker, or a link
or a named file points at nothing in the checkout."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("render_docs", ROOT / "scripts" / "render_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render_docs = _load()


def test_the_docs_agree_with_their_records():
    """`python scripts/render_docs.py --check`, in the suite: run the script without --check to re-render."""
    found = render_docs.problems()
    assert not found, "\n".join(f"{page}: {issue}" for page, issues in found.items() for issue in issues)


def test_every_record_has_the_schema_write_record_writes():
    keys = {"id", "value", "metric", "unit", "command", "preset", "commit", "date", "machine", "load", "extra"}
    records = render_docs.load_records()
    assert len(records) >= 20
    for name, record in records.items():
        assert set(record) == keys, name
        assert record["id"] == name and record["command"] and record["commit"] and record["date"], name


def test_each_domain_quotes_its_records():
    """The pages cite records of every measured domain: markers lost in an edit would leave a domain with none."""
    cited = {m["id"] for rel in render_docs.PAGES if (ROOT / rel).exists()
             for m in render_docs.MARK.finditer((ROOT / rel).read_text())}
    for domain in ("vision", "nlp", "rl", "gan"):
        assert any(c.startswith(f"{domain}.") for c in cited), domain


# ----------------------------------------------------------------------- the checks themselves, on a small tree
def _tree(tmp_path: Path, page: str, value: object = 1.83, extra: dict | None = None) -> Path:
    (tmp_path / "docs" / "results" / "records").mkdir(parents=True)
    record = {"id": "gan.fd", "value": value, "extra": extra or {"floor": 0.64}}
    (tmp_path / "docs" / "results" / "records" / "gan.fd.json").write_text(json.dumps(record))
    (tmp_path / "README.md").write_text(page)
    return tmp_path


def test_a_number_that_differs_from_its_record_is_found_and_rendered(tmp_path):
    page = "## x\nFD **<!--r gan.fd .2f-->1.97<!--/r-->** (floor <!--r gan.fd extra.floor-->0.64<!--/r-->)\n"
    root = _tree(tmp_path, page)
    found = render_docs.problems(root)
    assert any("differs from its record" in i for i in found["README.md"]), found
    assert render_docs.write(root) == ["README.md"]
    assert "-->1.83<!--/r-->" in (root / "README.md").read_text()
    assert render_docs.problems(root) == {}


@pytest.mark.parametrize("page, what", [
    ("<!--r gan.nope-->1<!--/r-->\n", "no record gan.nope"),
    ("<!--r gan.fd extra.nope-->1<!--/r-->\n", "has no extra.nope"),
    ("[results](docs/results/gone.md)\n", "link to a missing file"),
    ("run `scripts/repro/repro_gone.py`\n", "names a missing file"),
    ("read `../shared/DESIGN.md` first\n", "outside the repository"),
    ("[design](../shared/DESIGN.md)\n", "outside the repository"),
    ("<!--r gan.fd-->1.83 and on\n", "without its end"),
    ("<!--r gan.fd extra.floor %Y-->1<!--/r-->\n", "does not apply"),
    ("## What each domain reaches\n| gan | FD **1.97** in 326 s |\n", "without its record"),
])
def test_what_the_check_refuses(tmp_path, page, what):
    found = render_docs.problems(_tree(tmp_path, page))
    assert any(what in issue for issue in found.get("README.md", [])), found


def test_a_marked_headline_passes_and_code_spans_are_not_numbers(tmp_path):
    page = ("## What each domain reaches\n| gan | FD **<!--r gan.fd .2f-->1.83<!--/r-->** | `OMP_NUM_THREADS=2 python "
            "x.py --lr 0.5` |\n")
    assert render_docs.problems(_tree(tmp_path, page)) == {}


def test_a_broken_record_is_named_not_a_traceback(tmp_path):
    root = _tree(tmp_path, "<!--r gan.fd-->1.83<!--/r-->\n")
    (root / "docs" / "results" / "records" / "gan.bad.json").write_text("{not json")
    with pytest.raises(SystemExit, match="gan.bad.json is not a readable JSON record"):
        render_docs.problems(root)
