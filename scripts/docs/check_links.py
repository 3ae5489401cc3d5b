"""Checks the book and the README: every relative link reaches a file of the repository
(from a page of the book, a file of the book: a link leaving it breaks once built) and,
with a `#fragment`, a heading of that page (ids as mdBook makes them); every page under
docs/ is in docs/SUMMARY.md. Prints each fault and exits 1 if there is any.

    python3 scripts/docs/check_links.py REPO_ROOT
"""

from __future__ import annotations

import pathlib
import re
import sys

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")  # links and images
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    out, fence = [], None
    for line in text.splitlines():
        m = re.match(r"^\s*(```+|~~~+)", line)
        if m:
            if fence is None:
                fence = m.group(1)[:3]
            elif m.group(1).startswith(fence):
                fence = None
            continue
        if fence is None:
            out.append(line)
    return out


def heading_id(text: str) -> str:
    """mdBook's id of a heading (and GitHub's, for these pages): the text without markup,
    lower case, letters, digits, `-` and `_` kept, spaces to `-`."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    out = []
    for ch in text.strip().lower():
        if ch.isalnum() or ch in "-_":
            out.append(ch)
        elif ch.isspace():
            out.append("-")
    return "".join(out)


def ids(page: pathlib.Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in prose(page.read_text()):
        m = HEADING.match(line)
        if not m:
            continue
        base = heading_id(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def main() -> int:
    root = pathlib.Path(sys.argv[1]).resolve()
    pages = sorted((root / "docs").rglob("*.md")) + [root / "README.md"]
    faults = []
    cache: dict[pathlib.Path, set[str]] = {}
    for page in pages:
        text = "\n".join(prose(page.read_text()))
        text = re.sub(r"`[^`\n]*`", "", text)  # inline code is not a link
        for m in LINK.finditer(text):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto:
            path, _, frag = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(root)}: {target}"
            if not dest.exists():
                faults.append(f"{where}: no such file")
                continue
            if not dest.is_relative_to(root):
                faults.append(f"{where}: outside the repository")
                continue
            if page.is_relative_to(root / "docs") and not dest.is_relative_to(root / "docs"):
                faults.append(f"{where}: leaves the book (broken once built); name the file as code")
                continue
            if frag and dest.suffix == ".md":
                if dest not in cache:
                    cache[dest] = ids(dest)
                if frag not in cache[dest]:
                    faults.append(f"{where}: no heading #{frag} there")
    summary = root / "docs" / "SUMMARY.md"
    listed = {(summary.parent / t).resolve() for t in re.findall(r"\]\(([^)#]+)\)", summary.read_text())}
    for page in pages:
        if page.parent != root and page != summary and page not in listed:
            faults.append(f"{page.relative_to(root)}: not in docs/SUMMARY.md")
    for f in faults:
        print(f, file=sys.stderr)
    print(f"check_links: {len(pages)} pages, {len(faults)} faults", file=sys.stderr)
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())
