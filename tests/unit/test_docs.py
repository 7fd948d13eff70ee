"""The docs as a tree: README.md (short, the quick start, a map) and the pages of docs/.

Fast and without a broker: every relative link resolves (files, and anchors by GitHub's
rules), every page is reachable from the README, the quick-start markers stay where CI and
the demo test read them, and the configuration and metrics references match the code.
"""

from __future__ import annotations

import ast
import re
import tomllib
import typing
from collections import deque
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from monitor.config import SECRETS, ClassRule, Config

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 220

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(?:.+?)\1")
INLINE_LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT))


def prose(text: str) -> list[tuple[int, str]]:
    """The numbered lines of a Markdown text outside fenced code blocks."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: link text kept, lowercase, punctuation dropped (but
    hyphens and underscores), spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose(path.read_text(encoding="utf-8")):
        found.update(HTML_ANCHOR.findall(line))
        match = HEADING.match(line)
        if match is None:
            continue
        base = slug(match[2])
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """Every link target of a page (inline and reference-style), outside code."""
    targets = []
    for number, line in prose(path.read_text(encoding="utf-8")):
        text = CODE_SPAN.sub("", line)
        targets += [(number, target) for target in INLINE_LINK.findall(text)]
        if (reference := REFERENCE_LINK.match(text)) is not None:
            targets.append((number, reference[1]))
    return targets


def resolve(page: Path, target: str) -> tuple[Path | None, str, str | None]:
    """The file a relative link points at (None: not a file link), its anchor, or the
    problem with it."""
    if SCHEME.match(target):
        if target.startswith(("http://", "https://", "mailto:")):
            return None, "", None
        return None, "", "not a link to a page of the repository or to the web"
    location, _, anchor = target.partition("#")
    if not location:
        return page, anchor, None
    if location.startswith("/"):
        return None, anchor, "an absolute path: link files of the repository relatively"
    path = (page.parent / unquote(location)).resolve()
    if not path.is_relative_to(ROOT):
        return None, anchor, "outside the repository"
    if not path.exists():
        return None, anchor, "no such file"
    return path, anchor, None


def test_every_relative_link_resolves_to_a_file_and_a_heading() -> None:
    broken = []
    for page in pages():
        for number, target in links(page):
            path, anchor, problem = resolve(page, target)
            if problem is not None:
                broken.append(f"{shown(page)}:{number}: ({target}) {problem}")
            elif path is not None and anchor:
                if path.suffix != ".md":
                    broken.append(f"{shown(page)}:{number}: ({target}) an anchor into a "
                                  "file that is not Markdown")
                elif anchor not in anchors(path):
                    broken.append(f"{shown(page)}:{number}: ({target}) no heading "
                                  f"#{anchor} in {shown(path)}")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_page_of_the_docs_is_reachable_from_the_readme() -> None:
    reached, waiting = {README}, deque([README])
    while waiting:
        page = waiting.popleft()
        for _, target in links(page):
            path, _, problem = resolve(page, target)
            if problem is None and path is not None and path.suffix == ".md" \
                    and path not in reached and path.is_relative_to(DOCS):
                reached.add(path)
                waiting.append(path)
    unreached = [shown(page) for page in pages() if page not in reached]
    assert not unreached, "pages no link leads to from README.md: " + ", ".join(unreached)


def test_the_readme_is_short() -> None:
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines, at most {README_MAX_LINES}: move the details to docs/"
    )


def ci_command(lines: list[str], marker: str) -> str | None:
    """The line `.ci/run` executes: the first after the marker that starts with neither a
    backtick nor a blank (its awk rule)."""
    after = lines[lines.index(f"<!-- {marker} -->") + 1:]
    return next((line for line in after if line and not re.match(r"[`\s]", line)), None)


@pytest.mark.parametrize(("marker", "command"),
                         [("quickstart-demo", "./dev demo"), ("quickstart-test", "./dev test")])
def test_the_quick_start_markers_stay_with_their_commands(marker: str, command: str) -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert f"<!-- {marker} -->" in lines, f"README.md lost the marker <!-- {marker} -->"
    at = lines.index(f"<!-- {marker} -->")
    block = lines[at + 1:at + 4]
    assert block == ["```sh", command, "```"], (
        f"README.md: after <!-- {marker} --> expected a sh block holding {command!r}, "
        f"found {block}"
    )
    assert ci_command(lines, marker) == command, (
        f"the line .ci/run and tests/test_demo.py read after <!-- {marker} --> is "
        f"{ci_command(lines, marker)!r}, not {command!r}"
    )


# The configuration reference against the models of monitor/config.py and the example file.

CONFIGURATION = DOCS / "reference" / "configuration.md"
RULES = "query_classes.rules"
TABLE_HEADING = re.compile(r"^#{2,3}\s+\[{1,2}([a-z_.]+)\]{1,2}\s*$")
ROW = re.compile(r"^\|\s*`([a-z_]+)`\s*\|\s*([^|]*?)\s*\|")


def documented_settings() -> dict[str, dict[str, str]]:
    """Per table (``kafka``, ..., ``query_classes.rules``): key -> its default cell."""
    tables: dict[str, dict[str, str]] = {}
    table = None
    for _, line in prose(CONFIGURATION.read_text(encoding="utf-8")):
        if (heading := TABLE_HEADING.match(line)) is not None:
            table = heading[1]
            tables[table] = {}
        elif line.startswith("#"):
            table = None
        elif table is not None and (row := ROW.match(line)) is not None:
            tables[table][row[1]] = row[2]
    return tables


def section_models() -> dict[str, Any]:
    models: dict[str, Any] = {
        name: typing.get_args(field.annotation)[0]
        if typing.get_origin(field.annotation) is list else field.annotation
        for name, field in Config.model_fields.items()
    }
    models[RULES] = ClassRule
    return models


def model_keys(table: str, model: Any) -> set[str]:
    keys = {field.alias or name for name, field in model.model_fields.items()}
    return keys | {f"{key}_file" for section, key in SECRETS if section == table}


def example_keys() -> dict[str, set[str]]:
    """Every key config.example.toml sets or shows in a comment (``# key = ...``), by the
    section it is written in."""
    text = (ROOT / "config.example.toml").read_text(encoding="utf-8")
    keys: dict[str, set[str]] = {
        section: set(table) for section, table in tomllib.loads(text).items()
    }
    section = ""
    for line in text.splitlines():
        if (header := re.match(r"^(?:# )?\[{1,2}([a-z_]+)\]{1,2}\s*$", line)) is not None:
            section = header[1]  # a table, or an array of tables shown in a comment
        elif (commented := re.match(r"^#\s*([a-z_]+)\s*=", line)) is not None:
            keys.setdefault(section, set()).add(commented[1])
    return keys


def test_the_configuration_reference_has_every_key_of_the_models() -> None:
    documented = documented_settings()
    problems = []
    for table, model in section_models().items():
        keys = set(documented.get(table, {}))
        expected = model_keys(table, model)
        if table not in documented:
            problems.append(f"[{table}]: no table headed '## [{table}]'")
        if missing := expected - keys:
            problems.append(f"[{table}]: keys of monitor/config.py not documented: "
                            f"{sorted(missing)}")
        if extra := keys - expected:
            problems.append(f"[{table}]: documented keys the code does not have: {sorted(extra)}")
    for table in set(documented) - set(section_models()):
        problems.append(f"[{table}]: documented, but no such section in monitor/config.py")
    assert not problems, f"{shown(CONFIGURATION)}:\n" + "\n".join(problems)


def test_the_configuration_reference_has_every_key_of_the_example() -> None:
    documented = documented_settings()
    problems = []
    for section, keys in example_keys().items():
        known = set().union(*(
            table_keys for table, table_keys in documented.items()
            if table == section or table.startswith(f"{section}.")
        ))
        if missing := keys - known:
            problems.append(f"[{section}]: keys of config.example.toml not documented: "
                            f"{sorted(missing)}")
    assert not problems, f"{shown(CONFIGURATION)}:\n" + "\n".join(problems)


def default_of(table: str, key: str) -> tuple[bool, Any]:
    """(required, default) of a key in the code."""
    model = section_models()[table]
    field = next((f for name, f in model.model_fields.items() if (f.alias or name) == key),
                 None)
    if field is None:  # a secret's *_file
        return False, None
    return field.is_required(), None if field.is_required() else field.get_default(
        call_default_factory=True
    )


def read_default(table: str, key: str, cell: str) -> Any:
    """The value a documented default means, validated as the configuration would be."""
    toml = re.fullmatch(r"`(.+)`", cell)
    assert toml is not None, f"[{table}] {key}: the default {cell!r} is neither `TOML`, " \
        "'not set' nor 'required'"
    value = tomllib.loads(f"value = {toml[1]}")["value"]
    if table == RULES:
        return getattr(ClassRule.model_validate({"class": "x", key: value}),
                       "class_" if key == "class" else key)
    model = section_models()[table]
    if typing.get_origin(Config.model_fields[table].annotation) is list:  # an array of tables
        required = {name: f.examples[0] if f.examples else _FILLERS[name]
                    for name, f in model.model_fields.items() if f.is_required()}
        return getattr(model.model_validate({**required, key: value}), key)
    return getattr(getattr(Config.model_validate({table: {key: value}}), table), key)


_FILLERS: dict[str, Any] = {
    "id": "x", "attribute": "x", "control": "a", "split": {"a": 0.5, "b": 0.5},
}
"""Values of the required keys of an array of tables, to read one default at a time."""


def test_the_configuration_reference_gives_the_defaults_of_the_code() -> None:
    problems = []
    for table, rows in documented_settings().items():
        if table not in section_models():
            continue
        for key, cell in rows.items():
            required, default = default_of(table, key)
            if cell == "required" or required:
                if not (cell == "required" and required):
                    problems.append(f"[{table}] {key}: documented {cell!r}, "
                                    f"required in the code: {required}")
            elif cell == "not set":
                if default is not None:
                    problems.append(f"[{table}] {key}: documented as not set, the code's "
                                    f"default is {default!r}")
            else:
                try:
                    value = read_default(table, key, cell)
                except Exception as error:  # a cell that is no valid setting: say which
                    problems.append(f"[{table}] {key}: the default {cell} is not a valid "
                                    f"setting ({error})".replace("\n", " "))
                    continue
                if value != default:
                    problems.append(f"[{table}] {key}: documented {cell} ({value!r}), the "
                                    f"code's default is {default!r}")
    assert not problems, f"{shown(CONFIGURATION)}:\n" + "\n".join(problems)


# The metrics reference against the families the code declares and the golden exposition.

METRICS = DOCS / "reference" / "metrics.md"
FAMILY_ROW = re.compile(r"^\|\s*`([a-z_:][a-z0-9_:]*)`\s*\|\s*([a-z]+)\s*\|")
FAMILY_NAME = re.compile(r"^(search|searchmon)_[a-z0-9_]+$")


def documented_families() -> dict[str, str]:
    """Family name -> type, from the tables of the metrics reference."""
    families: dict[str, str] = {}
    for _, line in prose(METRICS.read_text(encoding="utf-8")):
        if (row := FAMILY_ROW.match(line)) is not None:
            assert row[1] not in families, f"{shown(METRICS)}: {row[1]} documented twice"
            families[row[1]] = row[2]
    return families


def base_name(name: str) -> str:
    """A family's name as the code declares it: prometheus_client adds ``_total`` to
    counters and ``_info`` to info families."""
    return name.removesuffix("_total").removesuffix("_info")


def declared_families() -> dict[str, str]:
    """Base name -> the file that declares it: every string constant of ``monitor/`` that is
    a ``search_*`` or ``searchmon_*`` name (only metric families are named so)."""
    declared: dict[str, str] = {}
    for source in sorted((ROOT / "monitor").rglob("*.py")):
        tree = ast.parse(source.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and FAMILY_NAME.match(node.value):
                declared.setdefault(base_name(node.value), shown(source))
    return declared


def golden_types() -> dict[str, str]:
    golden = next(ROOT.glob("tests/**/replay_small.metrics"))
    return dict(
        typing.cast(tuple[str, str], tuple(line.split()[2:4]))
        for line in golden.read_text(encoding="utf-8").splitlines()
        if line.startswith("# TYPE ")
    )


def test_the_metrics_reference_documents_exactly_the_declared_families() -> None:
    documented = {
        base_name(name): name for name in documented_families() if FAMILY_NAME.match(name)
    }
    declared = declared_families()
    missing = sorted(f"{name} ({declared[name]})" for name in set(declared) - set(documented))
    extra = sorted(documented[name] for name in set(documented) - set(declared))
    assert not missing and not extra, (
        f"{shown(METRICS)}: families the code declares but the page does not document: "
        f"{missing}; documented but declared nowhere in monitor/: {extra}"
    )


def test_the_metrics_reference_has_every_family_of_the_golden_exposition() -> None:
    documented = documented_families()
    problems = [
        f"{name}: {kind} in the exposition, "
        + (f"{documented[name]} in the page" if name in documented else "not documented")
        for name, kind in golden_types().items() if documented.get(name) != kind
    ]
    assert not problems, f"{shown(METRICS)}:\n" + "\n".join(problems)


def test_the_metrics_reference_gives_each_catalogued_family_its_type_and_labels() -> None:
    """Every family of the catalogue (``monitor.serve.metrics.CATALOGUE``) has its row, of
    its type and with its labels in order (the slice's labels as ``query_class``, which the
    page says is followed by the dimensions)."""
    from monitor.serve.metrics import BUILD, CATALOGUE, SLICE

    rows = {}
    for _, line in prose(METRICS.read_text(encoding="utf-8")):
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and FAMILY_ROW.match(line) is not None:
            rows[base_name(cells[0].strip("`"))] = (cells[1], re.findall(r"`([a-z_]+)`",
                                                                          cells[2]))
    problems = []
    for family in CATALOGUE:
        labels = ["query_class" if label == SLICE else label for label in family.labels]
        kind = family.kind
        if kind == "info":  # exposed as a gauge of 1 whose labels are the info
            kind, labels = "gauge", list(BUILD)
        found = rows.get(family.name)
        if found is None:
            problems.append(f"{family.name}: no row")
        elif found != (kind, labels):
            problems.append(f"{family.name}: documented {found}, declared "
                            f"{(kind, labels)}")
    assert not problems, f"{shown(METRICS)}:\n" + "\n".join(problems)


def test_the_measures_reference_lists_every_trec_eval_name() -> None:
    from monitor.offline.spec import TREC_MEASURES

    text = (DOCS / "reference" / "measures.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `([A-Za-z0-9_]+)` \|", text, re.MULTILINE))
    nicknames = {"all_trec", "official", "set"}
    missing = sorted(set(TREC_MEASURES) - listed - nicknames)
    assert not missing, f"docs/reference/measures.md: trec_eval names not listed: {missing}"
    for nickname in nicknames:
        assert f"`{nickname}`" in text, nickname
