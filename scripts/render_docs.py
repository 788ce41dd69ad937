"""Render the numbers that README.md and the pages under docs/ quote from their records, or check that they agree.

    python scripts/render_docs.py           # rewrite every marked number from docs/results/records/*.json
    python scripts/render_docs.py --check   # change nothing; list what differs, is missing or points at nothing

A quoted number is written between two HTML comments (invisible on GitHub) that name its record:

    **<!--r gan.fd-->1.83<!--/r-->**        the record's value, as stored
    <!--r gan.fd .2f-->1.83<!--/r-->        formatted (a Python format spec: .3f, ,.1f, .0f, .1%)
    <!--r gan.fd extra.floor .2f-->0.64<!--/r-->   a figure the record keeps beside its value (extra.seeds.0: a list's
                                                    first item; load: the machine's load)

The record is docs/results/records/<id>.json, written by the command that measured the number
(scripts/evidence/common.write_record). The rule, and which tables must be marked: docs/architecture.md.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORDS = ROOT / "docs" / "results" / "records"

MARK = re.compile(r"<!--r (?P<id>[a-z0-9_]+(?:\.[a-z0-9_]+)+)(?: (?P<field>value|load|extra\.[A-Za-z0-9_.]+))?"
                  r"(?: (?P<fmt>[^ >]+))?-->(?P<text>.*?)<!--/r-->")
# Opened and never closed, or closed twice: a marker the renderer would silently skip.
LOOSE = re.compile(r"<!--r [^>]*-->(?:(?!<!--/r-->).)*$|<!--r [^>]*-->(?:(?!<!--/r-->).)*<!--r ", re.M)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
# A file named in a code span, e.g. `scripts/repro/bf16_cpu_conv.py`: it must exist as named.
CODE_PATH = re.compile(r"`((?:scripts|docs|configs|tests|zoo|vision|nlp|rl|speech|gan)/[A-Za-z0-9_./-]+"
                       r"\.(?:py|md|yaml|sh|png|json|txt))`")
# A file beside the checkout (`../shared/DESIGN.md`): a user's clone has nothing there.
OUTSIDE = re.compile(r"`(\.\./[A-Za-z0-9_./-]+\.(?:py|md|yaml|sh|png|json|txt))`")

# The pages checked: README, scripts/README.md, the guides, the results pages and every other page under docs/.
PAGES = ["README.md", "scripts/README.md",
         *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))]


# Where every number must be marked: (page, the section's heading, bold numbers only). README's domain table and the
# results pages' tables are strict (every decimal, every time or share); in the guides the bold, headline ones.
# A decimal (not a version such as 2.9.2), or a count of seconds, minutes or percent.
ANY_NUMBER = re.compile(r"(?<![\d.])\d[\d,]*\.\d+(?!\.?\d)|\b\d+ ?(?:s|min|%)(?!\w)")
BOLD = re.compile(r"\*\*[^*\n]+\*\*")
HEADLINES = [("README.md", "## What each domain reaches", False),
             *((f"docs/results/{n}.md", "## Tables", False) for n in ("vision", "nlp", "rl", "gan")),
             *((f"docs/{n}.md", None, True) for n in ("vision", "nlp", "rl", "gan", "bench", "overhead"))]


def section(text: str, heading: str | None) -> str:
    """The lines under `heading` up to the next heading of its level (the whole text for None)."""
    if heading is None:
        return text
    level = heading.split(" ")[0] + " "
    out, inside = [], False
    for line in text.splitlines():
        if line.startswith(level):
            inside = line.strip() == heading
        elif inside:
            out.append(line)
    return "\n".join(out)


def unmarked(text: str, bold_only: bool) -> list[str]:
    """Quoted numbers (decimals, times, shares) in `text` outside markers, code spans, code blocks and link targets;
    with `bold_only`, those inside bold text only."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = MARK.sub("#", text)
    text = re.sub(r"`[^`]*`|\[[^\]]*\]\([^)]*\)|<!--.*?-->", "", text)  # code, links (their text names a section)
    spans = [m[0] for m in BOLD.finditer(text)] if bold_only else [text]
    return [f"{n[0]} (in {span[:50]!r})" if bold_only else n[0] for span in spans for n in ANY_NUMBER.finditer(span)]


def load_records(folder: Path = RECORDS) -> dict[str, dict]:
    """Every record by id; one that is not a JSON object with a value is refused by name."""
    records = {}
    for path in sorted(folder.glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise SystemExit(f"render_docs: {path} is not a readable JSON record ({type(e).__name__}); "
                             "re-run the command that writes it") from None
        if not isinstance(record, dict) or "value" not in record:
            raise SystemExit(f"render_docs: {path} holds no record (a JSON object with a value)")
        records[path.stem] = record
    return records


class Missing(LookupError):
    """A marker names a record, or a field of one, that does not exist."""


def shown(record: dict, field: str | None, fmt: str | None) -> str:
    """The text a marker shows: the record's value (or one of its extra figures), formatted."""
    value = record["value"]
    if field == "load":
        value = record["load"]
    elif field and field != "value":
        value = record.get("extra", {})
        for key in field.split(".")[1:]:
            if isinstance(value, list) and key.isdigit() and int(key) < len(value):
                value = value[int(key)]
            elif isinstance(value, dict) and key in value:
                value = value[key]
            else:
                raise Missing(f"{record['id']} has no {field}")
    if fmt:
        return format(value, fmt)
    return str(value)


def render(text: str, records: dict[str, dict]) -> tuple[str, list[str]]:
    """`text` with every marker's number replaced by its record's; and the markers that name nothing."""
    missing: list[str] = []

    def one(m: re.Match) -> str:
        record = records.get(m["id"])
        if record is None:
            missing.append(f"no record {m['id']} (docs/results/records/{m['id']}.json)")
            return m[0]
        try:
            new = shown(record, m["field"], m["fmt"])
        except Missing as e:
            missing.append(str(e))
            return m[0]
        except (ValueError, TypeError):  # e.g. .2f asked of a text value
            missing.append(f"{m['id']}: format {m['fmt']!r} does not apply to {m['field'] or 'value'}")
            return m[0]
        return m[0][: m.start("text") - m.start()] + new + "<!--/r-->"

    return MARK.sub(one, text), missing


def broken_references(page: Path, text: str, root: Path = ROOT) -> list[str]:
    """Relative links and code-span file names in `text` that name no file of the checkout, and links that leave
    the repository."""
    out = []
    for m in LINK.finditer(text):
        target = (m[1] or m[2]).split("#")[0]
        if not target or re.match(r"[a-z]+:", target):
            continue
        path = (page.parent / target).resolve()
        if not path.is_relative_to(root.resolve()):
            out.append(f"link outside the repository: {target}")
        elif not path.exists():
            out.append(f"link to a missing file: {target}")
    for m in CODE_PATH.finditer(text):
        if not (root / m[1]).exists():
            out.append(f"names a missing file: {m[1]}")
    out += [f"names a file outside the repository: {m[1]}" for m in OUTSIDE.finditer(text)]
    return out


def problems(root: Path = ROOT, records: dict[str, dict] | None = None) -> dict[str, list[str]]:
    """Per page: numbers that differ from their record, markers naming no record, broken markers, links and file
    names pointing at nothing. Empty when the docs agree with the records."""
    records = load_records(root / "docs" / "results" / "records") if records is None else records
    found: dict[str, list[str]] = {}
    for rel in PAGES:
        page = root / rel
        if not page.exists():
            continue
        text = page.read_text()
        new, missing = render(text, records)
        issues = list(missing) + broken_references(page, text, root)
        issues += [f"a marker without its end: {m[0][:60]}" for m in LOOSE.finditer(text)]
        for page_rel, heading, bold_only in HEADLINES:
            if page_rel == rel:
                issues += [f"a number without its record ({heading or 'the page'}): {n}"
                           for n in unmarked(section(text, heading), bold_only)]
        for old_line, new_line in zip(text.splitlines(), new.splitlines(), strict=True):
            if old_line != new_line:
                issues.append(f"differs from its record: {old_line.strip()[:160]}")
        if issues:
            found[rel] = issues
    return found


def write(root: Path = ROOT) -> list[str]:
    """Rewrite every page's marked numbers from the records; returns the pages changed."""
    records = load_records(root / "docs" / "results" / "records")
    changed = []
    for rel in PAGES:
        page = root / rel
        if page.exists():
            text = page.read_text()
            new, _ = render(text, records)
            if new != text:
                page.write_text(new)
                changed.append(rel)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     usage="python scripts/render_docs.py [--check]")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a page disagrees")
    args = parser.parse_args(argv)
    if not args.check:
        for rel in write():
            print(f"rendered {rel}")
    found = problems()
    for rel, issues in found.items():
        for issue in issues:
            print(f"{rel}: {issue}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
