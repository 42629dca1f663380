"""Write the section "Cameras decode_mem recognises in a file" of ``docs/cameras.md`` from the camera table
(``decode_mem/io/camera_table.yaml``): ``python docs/make_cameras.py``."""

from __future__ import annotations

from pathlib import Path

from decode_mem.io.camera_table import DOC_HEADING, table_markdown

PAGE = Path(__file__).resolve().parent / "cameras.md"


def with_section(page: str, section: str) -> str:
    """``page`` with the section under ``DOC_HEADING`` replaced by ``section`` (added at the end if absent)."""
    start = page.find(DOC_HEADING)
    if start < 0:
        return page.rstrip("\n") + "\n\n" + section
    end = page.find("\n## ", start + len(DOC_HEADING))
    return page[:start] + section + (page[end:] if end >= 0 else "")


if __name__ == "__main__":
    PAGE.write_text(with_section(PAGE.read_text(), table_markdown()))
